"""The server's log lines written to stderr by a thread of their own, never by the event loop.

A client that starts ``serve`` with stderr on a pipe it never reads fills that pipe after
about 64 KB of warnings (a client sending lines that are not UTF-8 gets one each): the next
write then blocks, and when the event loop is the writer the whole server freezes, answering
nothing more. Records wait in a bounded queue; past the bound they are dropped and counted,
and the count is said once stderr takes lines again. The thread writes to the descriptor
itself, holding no lock of ``sys.stderr``'s that the end of the process would wait for.

A client that reads stderr only once the server has exited (to show why it ended) would
never see that count: the pipe was full to the end. The thread waits in its write for the
reader (the kernel wakes it when there is room), and at exit the pipe is made larger (Linux's
F_SETPIPE_SZ, which a full pipe's writer may do too) to take one line more: the count of the
lines never written. Where the pipe cannot grow (not Linux, or at the limit of
``/proc/sys/fs/pipe-max-size``), that count is written only if the pipe has room for it."""

from __future__ import annotations

import logging
import os
import queue
import select
import stat
import sys
import threading

if sys.platform != "win32":
    import fcntl

# Log records waiting for stderr at most; past it they are dropped (and counted).
MAX_WAITING = 1000
# How long the end of the process waits for the records still queued (stderr may be stuck).
FLUSH_SECONDS = 1.0
# How long the end of the process waits for a write under way, to say the count after it.
LAST_WRITE_SECONDS = 0.2


def dropped_notice(count: int, when: str = "dropped") -> str:
    return f"WARNING {__name__}: {count} log message(s) {when}: stderr was not being read\n"


class QueuedStderr(logging.Handler):
    """Hands each record, formatted, to a writer thread through a queue of ``max_waiting``
    lines, which writes them to ``fd``; when the queue is full a record is dropped and
    counted, and the count is written before the next line, or at ``close`` (the end of the
    process) with those still queued."""

    def __init__(self, fd: int, max_waiting: int = MAX_WAITING) -> None:
        super().__init__()
        self.fd = fd
        self._lines: queue.Queue[str] = queue.Queue(max_waiting)
        self._lock = threading.Lock()  # the two counts below
        self._dropped = 0
        self._unwritten = 0  # queued or being written
        self._writing = threading.Lock()  # held for each write to fd
        self._closing = threading.Event()
        self.writer = threading.Thread(target=self._write, name="stderr-log", daemon=True)
        self.writer.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
            with self._lock:
                self._lines.put_nowait(line)
                self._unwritten += 1
        except queue.Full:
            with self._lock:
                self._dropped += 1
        except Exception:  # a record that cannot be formatted, as logging says of it
            self.handleError(record)

    def _write(self) -> None:
        while True:
            line = self._lines.get()
            with self._lock:
                dropped = self._dropped
            if dropped:
                line = dropped_notice(dropped) + line
            data = line.encode("utf-8", errors="backslashreplace")
            with self._writing:  # a line at a time: the count at exit starts a line
                if not self._closing.is_set():  # else close counts this line
                    _write_all(self.fd, data)  # waits while the reader reads nothing
                    with self._lock:
                        self._dropped -= dropped
                        self._unwritten -= 1
            self._lines.task_done()

    def flush(self) -> None:
        """Waits until the lines queued are written, for at most ``FLUSH_SECONDS``."""
        done = self._lines.all_tasks_done
        with done:
            done.wait_for(lambda: not self._lines.unfinished_tasks, timeout=FLUSH_SECONDS)

    def close(self) -> None:
        """Stops the writer; says on stderr how many lines were never written, if any (and if
        stderr takes one line without waiting: a full pipe is made larger for it)."""
        self._closing.set()
        if not _takes_a_line(self.fd):
            _grow_pipe(self.fd)  # room for the write under way, if any, and the count
        if self._writing.acquire(timeout=LAST_WRITE_SECONDS):  # not stuck in a write
            try:
                with self._lock:
                    lost = self._dropped + self._unwritten
                    self._dropped = self._unwritten = 0
                if lost and _takes_a_line(self.fd):
                    _write_all(self.fd, dropped_notice(lost, "never written").encode())
            except OSError:
                pass  # stderr closed: nobody to tell
            finally:
                self._writing.release()
        super().close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass  # stderr closed: nobody to tell


def _grow_pipe(fd: int) -> None:
    """Doubles the room of the pipe ``fd`` if it is one and may grow (on Linux, up to
    ``/proc/sys/fs/pipe-max-size`` without privileges); anything else stays as it is."""
    if sys.platform != "linux":
        return
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 2 * fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ))
    except OSError:
        pass  # at the limit, or not ours to grow: the count is written if there is room


def _takes_a_line(fd: int) -> bool:
    """Whether a write of up to ``select.PIPE_BUF`` bytes to ``fd`` would not block."""
    try:
        return bool(select.select([], [fd], [], 0)[1])
    except (OSError, ValueError):
        return False


def log_to_stderr_off_the_loop() -> QueuedStderr | None:
    """Puts a ``QueuedStderr`` in the place of the root logger's handler writing to stderr
    (``plain_logging``'s), with its format, and sends Python's warnings through it; the new
    handler, or None when there was no such handler or stderr has no descriptor."""
    root = logging.getLogger()
    for handler in root.handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr:
            try:
                fd = sys.stderr.fileno()
            except (AttributeError, OSError, ValueError):
                return None
            queued = QueuedStderr(fd)
            queued.setFormatter(handler.formatter)
            queued.setLevel(handler.level)
            root.removeHandler(handler)
            root.addHandler(queued)
            logging.captureWarnings(True)
            return queued
    return None
