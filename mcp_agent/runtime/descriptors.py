"""The process's file-descriptor budget: how many runs and connections fit under ``ulimit -n``.

A server that runs out of descriptors fails in places it cannot answer from (accepting a
connection, opening a database file, logging the error), so the budget is kept by refusing
work up front: runs beyond what fits are refused like any other run limit, and the HTTP server
answers 503 beyond the connections that fit."""

from __future__ import annotations

# Descriptors held at rest: the database and its WAL files on each worker thread, the leases,
# the listening socket, logs, a few downstream servers.
RESERVED = 128
# What one run may hold at once: its model stream, a downstream server's pipes, a database
# reader on the thread that saves for it.
PER_RUN = 8
# The most a server asks for when it raises its own soft limit.
WANTED = 65_536


def descriptor_limit() -> int | None:
    """The soft limit on open files, or None where the platform has none to read."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def raise_descriptor_limit() -> int | None:
    """Raise the soft limit towards the hard one (as far as WANTED), as servers do; returns the
    limit in force."""
    try:
        import resource
    except ImportError:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = WANTED if hard == resource.RLIM_INFINITY else min(hard, WANTED)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
    return descriptor_limit()


def runs_that_fit(limit: int | None) -> int:
    """Runs that fit in half of what is left after the reserve (0: no bound known)."""
    if limit is None:
        return 0
    return max(1, (limit - RESERVED) // 2 // PER_RUN)


def connections_that_fit(limit: int | None) -> int | None:
    """HTTP connections that fit in the other half (None: no bound known)."""
    if limit is None:
        return None
    return max(8, (limit - RESERVED) // 2)
