"""The guard of a downstream server's process group: the group's leader, which starts the
server and ends the group when the process that started it is gone, however that ended.

A server started as a child hears its parent's end only as the end of its input, which a server
busy with a call (or one that ignores it) does not read: a ``serve`` killed with SIGKILL would
leave it running, with what it started, holding files and ports. Linux's parent-death signal is
no answer: it comes when the *thread* that started the child ends, and it reaches the child
alone, not what the child starts. So ``child_stdio`` starts this script (``python -I -S``,
standard library only) as the leader of a new process group, with the read end of a pipe whose
write end only the starting process holds. The script starts the server in its group, with the
same input, output, environment and folder, and waits. When the server ends, the script ends
the same way (its exit status, or its signal). When the pipe ends instead (the process that
started it is gone: its descriptors closed at its end), the script sends the group SIGTERM,
gives the server ``grace`` seconds, then sends the group SIGKILL, itself included.

Usage: ``python -I -S child_guard.py ALIVE STATUS GRACE COMMAND [ARG ...]``: ``ALIVE`` is the
pipe's read end; ``STATUS`` a pipe's write end that gets the errno of a server that could not
be started (then the script exits with 127), and is closed at once otherwise. Nothing but the
standard library is imported: the script starts before each server, outside the package.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from contextlib import suppress

# Signals the guard ignores (a SIGTERM to the group is for the server: the guard stays to say
# how it ended); the server gets the disposition they had when the guard started.
DEAF = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
# Set back to the default for the server, as ``subprocess`` does (Python ignores them).
RESTORED = (signal.SIGPIPE, signal.SIGXFSZ)


def main(argv: list[str]) -> int:
    alive, status, grace, command = int(argv[1]), int(argv[2]), float(argv[3]), argv[4:]
    for fd in (alive, status):
        os.set_inheritable(fd, False)
    # A child's end is heard on a pipe of our own (SIGCHLD's wake-up), beside ``alive``.
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    defaults = [*RESTORED]
    for sig in DEAF:
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            defaults.append(sig)
        signal.signal(sig, signal.SIG_IGN)
    try:
        pid = os.posix_spawnp(command[0], command, os.environ, setsigdef=defaults)
    except OSError as error:
        os.write(status, str(error.errno or 0).encode())
        return 127
    os.close(status)
    # Our copies of the server's input and output would keep its pipes open past its end.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    os.close(null)
    while True:
        ready, _, _ = select.select([alive, woken], [], [])
        if woken in ready:
            os.read(woken, 512)
            done, code = os.waitpid(pid, os.WNOHANG)
            if done:
                return _end_as(code)
        if alive in ready:  # its end: whoever started us is gone
            _end_group(pid, woken, grace)


def _end_group(pid: int, woken: int, grace: float) -> None:
    """SIGTERM to the server and to the group (when this process leads one of its own),
    ``grace`` seconds for the server to end, then SIGKILL to both: this process ends with
    them."""
    leader = os.getpgrp() == os.getpid()  # a group of our own: never our starter's group
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with suppress(OSError):
            os.kill(pid, sig)
        if leader:
            with suppress(OSError):
                os.killpg(0, sig)
        end = time.monotonic() + grace
        while (left := end - time.monotonic()) > 0:
            if select.select([woken], [], [], left)[0]:
                os.read(woken, 512)
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break


def _end_as(code: int) -> int:
    """End as the server ended: with its exit status, or by its signal (without a core)."""
    if not os.WIFSIGNALED(code):
        return os.waitstatus_to_exitcode(code)
    sig = os.WTERMSIG(code)
    with suppress(OSError, ValueError):
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return 128 + sig


if __name__ == "__main__":
    sys.exit(main(sys.argv))
