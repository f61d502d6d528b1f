"""A hostile MySQL server, just enough of the protocol to steal a password: the handshake
offers mysql_native_password, then an auth switch asks for ``mysql_clear_password`` (or
MariaDB's ``dialog``, PAM's way), then any command is answered OK. Every byte a client sends
is kept in ``received``."""

from __future__ import annotations

import socketserver
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_CAPABILITIES = (
    1  # LONG_PASSWORD
    | 512  # PROTOCOL_41
    | 8192  # TRANSACTIONS
    | 32768  # SECURE_CONNECTION
    | (1 << 19)  # PLUGIN_AUTH
)
_OK = b"\x00\x00\x00\x02\x00\x00\x00"  # OK, 0 rows, no insert id, autocommit, no warnings


def _handshake() -> bytes:
    return (
        b"\x0a5.7.99-fake\x00"
        + struct.pack("<I", 7)
        + b"saltsalt\x00"
        + struct.pack("<HBHHB", _CAPABILITIES & 0xFFFF, 33, 2, _CAPABILITIES >> 16, 21)
        + b"\x00" * 10
        + b"moresaltmore\x00"
        + b"mysql_native_password\x00"
    )


def _switch_request(plugin: str) -> bytes:
    data = b"\x04Password: " if plugin == "dialog" else b""
    return b"\xfe" + plugin.encode() + b"\x00" + data


class _Handler(socketserver.BaseRequestHandler):
    server: FakeMySQLServer

    def handle(self) -> None:
        self.request.settimeout(10)
        try:
            self._send(0, _handshake())
            sequence, _ = self._read()  # the handshake response
            self._send(sequence + 1, _switch_request(self.server.plugin))
            sequence, _ = self._read()  # the answer to the switch: the password, if sent
            self._send(sequence + 1, _OK)
            while True:
                sequence, payload = self._read()
                if payload[:1] == b"\x01":  # COM_QUIT
                    return
                self._send(sequence + 1, _OK)
        except (ConnectionError, TimeoutError, EOFError):
            return

    def _read(self) -> tuple[int, bytes]:
        header = self._exactly(4)
        length = int.from_bytes(header[:3], "little")
        payload = self._exactly(length)
        with self.server.lock:
            self.server.received += header + payload
        return header[3], payload

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.request.recv(size - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def _send(self, sequence: int, payload: bytes) -> None:
        self.request.sendall(
            len(payload).to_bytes(3, "little") + bytes([sequence & 0xFF]) + payload
        )


class FakeMySQLServer(socketserver.ThreadingTCPServer):
    daemon_threads = False
    block_on_close = True  # server_close() waits for every connection's handler

    def __init__(self, plugin: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.plugin = plugin
        self.received = b""
        self.lock = threading.Lock()

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@contextmanager
def fake_mysql(plugin: str = "mysql_clear_password") -> Iterator[FakeMySQLServer]:
    """The server, serving in a thread; on exit every connection's handler has finished, so
    ``received`` is complete."""
    server = FakeMySQLServer(plugin)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
