"""pi's scripts (tests/data/pi/*.mjs) kept running: one Node process a script, answering job
after job. Imported by conftest, so only the standard library at the top."""

from __future__ import annotations

import json
import select
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class PiScript:
    """A Node script of tests/data/pi as one process that answers job after job (a JSON line
    in, a JSON line out; an ``error`` for a job pi failed), started at its first job: a start
    loads pi's code, some 2 s of CPU, and test_sessions_pi alone asks pi about 45 files."""

    def __init__(self, script: Path) -> None:
        self.script = script
        self.process: subprocess.Popen[str] | None = None
        self.stderr = tempfile.TemporaryFile()

    def ask(self, job: Mapping[str, Any]) -> dict[str, Any]:
        if self.process is None:
            from mcp_support import find_pi

            found = find_pi()
            assert found is not None, "Node or pi is not installed (.ci/peers)"
            node, peers = found
            self.process = subprocess.Popen(
                [node, str(self.script), str(peers), "-"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                text=True,
            )
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(job) + "\n")
        stdin.flush()
        if not select.select([stdout], [], [], 60)[0]:
            raise TimeoutError(f"{self.script.name} gave no answer to {job} within 60 s")
        line = stdout.readline()
        if not line:
            self.stderr.seek(0)
            said = self.stderr.read().decode(errors="replace")
            raise RuntimeError(f"{self.script.name} ended ({self.process.poll()}): {said}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"pi failed on {job}: {answer['error']}")
        return dict(answer)

    def close(self) -> None:
        if self.process is not None:
            assert self.process.stdin is not None and self.process.stdout is not None
            self.process.stdin.close()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process.stdout.close()
        self.stderr.close()


_pi_scripts: dict[Path, PiScript] = {}


def pi_script(script: Path) -> PiScript:
    """``script``'s one process in this test process (stopped by stop_pi_scripts)."""
    if script not in _pi_scripts:
        _pi_scripts[script] = PiScript(script)
    return _pi_scripts[script]


def stop_pi_scripts() -> None:
    while _pi_scripts:
        _pi_scripts.popitem()[1].close()
