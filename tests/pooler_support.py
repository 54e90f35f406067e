"""A stand-in for PgBouncer (not installed on the machine the tests run on) in front of a test
cluster, for what a server can see of a pooler: each client is handed a cancel key of the
pooler's own (PgBouncer's is random), so the backend pid a connection is told is not the pid
of the backend that answers it; with ``refuse_options``, a startup packet that carries
``options`` is refused, in PgBouncer's words before 1.20 (later ones refuse each setting in
it that they do not track, unless ``ignore_startup_parameters`` drops them all). Each client
gets a server connection of its own (as in session mode): that is all these tests need."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

_NEGOTIATIONS = (80877103, 80877104)  # SSLRequest, GSSENCRequest: answered "no"
_REFUSAL = b"unsupported startup parameter: options"


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _error(message: bytes) -> bytes:
    fields = b"SFATAL\x00VFATAL\x00C08P01\x00M" + message + b"\x00\x00"
    return b"E" + struct.pack(">i", len(fields) + 4) + fields


class FakePooler:
    def __init__(self, upstream_port: int, refuse_options: bool = False) -> None:
        self.upstream_port = upstream_port
        self.refuse_options = refuse_options
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, database_url: str) -> str:
        """``database_url`` (a test cluster's) through this pooler."""
        return database_url.replace(f":{self.upstream_port}/", f":{self.port}/")

    def close(self) -> None:
        for sock in [self._listener, *self._sockets]:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with suppress(OSError, ConnectionError):
            length, code = struct.unpack(">ii", _read(client, 8))
            while code in _NEGOTIATIONS:
                client.sendall(b"N")
                length, code = struct.unpack(">ii", _read(client, 8))
            rest = _read(client, length - 8)
            names = rest.split(b"\x00")[0::2]
            if self.refuse_options and b"options" in names:
                client.sendall(_error(_REFUSAL))
                client.close()
                return
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._sockets.append(server)
            server.sendall(struct.pack(">ii", length, code) + rest)
            while True:  # the server's answers up to ReadyForQuery, its BackendKeyData ours
                kind = _read(server, 1)
                size = struct.unpack(">i", _read(server, 4))[0]
                body = _read(server, size - 4)
                if kind == b"K":
                    pid, secret = struct.unpack(">ii", body)
                    body = struct.pack(">ii", pid ^ 0x5A5A5A, secret)
                client.sendall(kind + struct.pack(">i", size) + body)
                if kind in (b"Z", b"E"):
                    break
            threading.Thread(target=_pipe, args=(client, server), daemon=True).start()
            _pipe(server, client)


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for sock in (source, sink):
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


@contextmanager
def fake_pooler(upstream_port: int, refuse_options: bool = False) -> Iterator[FakePooler]:
    pooler = FakePooler(upstream_port, refuse_options)
    try:
        yield pooler
    finally:
        pooler.close()
