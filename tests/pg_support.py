"""A PostgreSQL cluster of the tests' own: initdb and pg_ctl in a temporary folder, on a free
loopback port, stopped at the end. PostgreSQL refuses to run as root (CI runs as root), so
there the cluster runs as the ``postgres`` user, in a folder that user owns.

The folder is in memory where the machine has one (``/dev/shm``): the tests need no
durability (fsync is off), and on disk each test's database cost some 0.3 to 0.4 s to make
(CREATE DATABASE copies template1, 7.5 MB, and checkpoints; 0.06 s in memory), and deleting
the run's databases at the end, written back to disk by then, took 36 to 72 s of a worker's
last test."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mcp_support import free_port

PG_BIN = Path(os.environ.get("MCP_AGENT_PG_BIN", "/usr/lib/postgresql/15/bin"))


def why_no_postgres() -> str | None:
    """Why a test cluster cannot start here, or None when it can."""
    if not (PG_BIN / "initdb").exists() or not (PG_BIN / "pg_ctl").exists():
        return (
            f"PostgreSQL server binaries not found in {PG_BIN} (apt-get install postgresql,"
            " or set MCP_AGENT_PG_BIN)"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no `postgres` user to run PostgreSQL as"
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing (util-linux)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    return None


class Cluster:
    """A running test cluster; :meth:`new_database` makes an empty database and its URL."""

    def __init__(self, folder: Path, port: int, as_postgres: bool, settings: list[str]) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.port = port
        self.as_postgres = as_postgres
        self.settings = settings
        self.admin_url = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def _run(self, *args: str) -> None:
        command = [*(["runuser", "-u", "postgres", "--"] if self.as_postgres else []), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        self._run(
            str(PG_BIN / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        options = " ".join(
            [
                f"-p {self.port}",
                f"-k {self.folder}",
                "-c listen_addresses=127.0.0.1",
                *(f"-c {setting}" for setting in self.settings),
            ]
        )
        log = self.folder / "log"
        self._run(
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(log),
            "-o",
            options,
            "-w",
            "start",
        )

    def stop(self) -> None:
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def new_database(self) -> str:
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            # FILE_COPY: a copy of template1's files, five times quicker than the WAL-logged
            # default on a cluster without fsync.
            conn.execute(f"CREATE DATABASE {name} STRATEGY FILE_COPY")
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def drop_database(self, url: str) -> None:
        """Drop the database of ``url`` (made by :meth:`new_database`), ending any session
        still on it: the cluster keeps the size of the databases in use, not of the run's."""
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def cluster_parent() -> str | None:
    """Where the clusters' folders go: memory (``/dev/shm``) where there is one to write to,
    else the usual temporary folder."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


@contextmanager
def running_cluster(settings: list[str] | None = None) -> Iterator[Cluster]:
    """A cluster for the length of the block. ``settings`` are ``name=value`` server settings;
    the default trades durability for speed (fsync off), as tests need no power-loss safety."""
    if settings is None:
        settings = ["fsync=off", "synchronous_commit=off", "full_page_writes=off"]
    settings = [*settings, "max_connections=300"]
    as_postgres = os.geteuid() == 0
    folder = Path(tempfile.mkdtemp(prefix="mcp-agent-pg-", dir=cluster_parent()))
    try:
        if as_postgres:
            entry = pwd.getpwnam("postgres")
            os.chown(folder, entry.pw_uid, entry.pw_gid)
        cluster = Cluster(folder, free_port(), as_postgres, settings)
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
