"""The server's log lines written to stderr by a thread of their own, never by the event loop.

A client that starts ``serve`` with stderr on a pipe it never reads fills that pipe after
about 64 KB of warnings (a client sending lines that are not UTF-8 gets one each): the next
write then blocks, and when the event loop is the writer the whole server freezes, answering
nothing more. Records wait in a bounded queue; past the bound they are dropped and counted,
and the count is said once stderr takes lines again. The thread writes to the descriptor
itself, holding no lock of ``sys.stderr``'s that the end of the process would wait for."""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading

# Log records waiting for stderr at most; past it they are dropped (and counted).
MAX_WAITING = 1000
# How long the end of the process waits for the records still queued (stderr may be stuck).
FLUSH_SECONDS = 1.0


class QueuedStderr(logging.Handler):
    """Hands each record, formatted, to a writer thread through a queue of ``max_waiting``
    lines, which writes them to ``fd``; when the queue is full a record is dropped and
    counted, and the count is written before the next line."""

    def __init__(self, fd: int, max_waiting: int = MAX_WAITING) -> None:
        super().__init__()
        self.fd = fd
        self._lines: queue.Queue[str] = queue.Queue(max_waiting)
        self._lock = threading.Lock()
        self._dropped = 0
        threading.Thread(target=self._write, name="stderr-log", daemon=True).start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._lines.put_nowait(self.format(record) + "\n")
        except queue.Full:
            with self._lock:
                self._dropped += 1
        except Exception:  # a record that cannot be formatted, as logging says of it
            self.handleError(record)

    def _write(self) -> None:
        while True:
            line = self._lines.get()
            with self._lock:
                dropped, self._dropped = self._dropped, 0
            if dropped:
                notice = f"{dropped} log message(s) dropped: stderr was not being read"
                line = f"WARNING {__name__}: {notice}\n{line}"
            data = memoryview(line.encode("utf-8", errors="backslashreplace"))
            try:
                while data:
                    data = data[os.write(self.fd, data) :]
            except OSError:
                pass  # stderr closed: nobody to tell
            self._lines.task_done()

    def flush(self) -> None:
        """Waits until the lines queued are written, for at most ``FLUSH_SECONDS``."""
        done = self._lines.all_tasks_done
        with done:
            done.wait_for(lambda: not self._lines.unfinished_tasks, timeout=FLUSH_SECONDS)


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
