"""A hostile MySQL server, just enough of the protocol to steal a password: the handshake
offers mysql_native_password, then an auth switch asks for ``mysql_clear_password`` (or
MariaDB's ``dialog``, PAM's way), then any command is answered OK. Every byte a client sends
is kept in ``received``.

With ``caching_sha2_password`` or ``sha256_password`` (named in the handshake, as MySQL 8
does, or in an auth switch with ``switch=True``) it asks for RSA full authentication
(``caching_sha2_password``: 0x01 0x04 after the scramble, or 0x01 0x03, the fast path, with
``fast=True``), serves its own RSA public key (``public_pem``) and decrypts whatever the
client encrypts: a recovered password lands in ``recovered``."""

from __future__ import annotations

import socketserver
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

_CAPABILITIES = (
    1  # LONG_PASSWORD
    | 512  # PROTOCOL_41
    | 8192  # TRANSACTIONS
    | 32768  # SECURE_CONNECTION
    | (1 << 19)  # PLUGIN_AUTH
)
_OK = b"\x00\x00\x00\x02\x00\x00\x00"  # OK, 0 rows, no insert id, autocommit, no warnings
SALT = b"saltsaltmoresaltmore"
RSA_PLUGINS = ("caching_sha2_password", "sha256_password")


@cache
def rsa_key(which: int) -> RSAPrivateKey:
    """A test RSA key (``which`` tells two apart), made once per run."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_pem(which: int = 0) -> bytes:
    return (
        rsa_key(which)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def _decrypt(private: RSAPrivateKey, data: bytes, salt: bytes) -> bytes | None:
    """What the server reads from an RSA full authentication: the password, if the client
    used this server's key."""
    oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    try:
        message = private.decrypt(data, oaep)
    except ValueError:
        return None
    plain = bytes(b ^ salt[i % len(salt)] for i, b in enumerate(message))
    return plain.rstrip(b"\x00")


def _handshake(plugin: str = "mysql_native_password") -> bytes:
    return (
        b"\x0a5.7.99-fake\x00"
        + struct.pack("<I", 7)
        + b"saltsalt\x00"
        + struct.pack("<HBHHB", _CAPABILITIES & 0xFFFF, 33, 2, _CAPABILITIES >> 16, 21)
        + b"\x00" * 10
        + b"moresaltmore\x00"
        + plugin.encode()
        + b"\x00"
    )


def _switch_request(plugin: str) -> bytes:
    data = b"\x04Password: " if plugin == "dialog" else b""
    return b"\xfe" + plugin.encode() + b"\x00" + data


class _Handler(socketserver.BaseRequestHandler):
    server: FakeMySQLServer

    def handle(self) -> None:
        self.request.settimeout(10)
        try:
            if self.server.plugin in RSA_PLUGINS:
                sequence = self._rsa_authentication()
            else:
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

    def _rsa_authentication(self) -> int:
        """Up to the client's last authentication packet; its sequence number."""
        plugin = self.server.plugin
        if self.server.switch:
            self._send(0, _handshake())
            sequence, _ = self._read()
            self._send(sequence + 1, b"\xfe" + plugin.encode() + b"\x00" + SALT + b"\x00")
            sequence, answer = self._read()  # a scramble, or sha256_password's key request
        else:
            self._send(0, _handshake(plugin))
            sequence, _ = self._read()  # the handshake response (a scramble, or b"\x01")
            answer = b"\x01" if plugin == "sha256_password" else b""
        if plugin == "caching_sha2_password":
            if self.server.fast:
                self._send(sequence + 1, b"\x01\x03")
                return sequence + 1
            self._send(sequence + 1, b"\x01\x04")  # full authentication, please
            sequence, answer = self._read()
            if answer == b"\x02":  # the client asks for the server's public key
                answer = b"\x01"
        if answer == b"\x01":
            self._send(sequence + 1, b"\x01" + public_pem())
            sequence, answer = self._read()
        found = _decrypt(rsa_key(0), answer, SALT)
        if found is not None:
            with self.server.lock:
                self.server.recovered = found
        return sequence

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

    def __init__(self, plugin: str, switch: bool = False, fast: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.plugin = plugin
        self.switch = switch
        self.fast = fast
        self.received = b""
        self.recovered: bytes | None = None
        self.lock = threading.Lock()

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@contextmanager
def fake_mysql(
    plugin: str = "mysql_clear_password", *, switch: bool = False, fast: bool = False
) -> Iterator[FakeMySQLServer]:
    """The server, serving in a thread; on exit every connection's handler has finished, so
    ``received`` (and ``recovered``) is complete."""
    server = FakeMySQLServer(plugin, switch, fast)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
