"""Blocking client of fmpi-relay, used by ranks (register, wait for the world) and launchers (create, watch)."""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .protocol import HEADER_SIZE, MAX_SERVER_FRAME, Kind, ProtocolError, decode_body, decode_header, encode


class RelayError(Exception):
    """The relay refused a request, failed the job, or cannot be reached."""

    def __init__(self, message: str, code: str = "error", details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.details = details or {}


class Aborted(RelayError):
    """The job was aborted (by a rank or by the launcher)."""

    def __init__(self, code: int, reason: str, rank: int | None) -> None:
        who = "the launcher" if rank is None else f"rank {rank}"
        super().__init__(f"job aborted by {who}: {reason}", "aborted")
        self.exit_code = code
        self.reason = reason
        self.rank = rank


def parse_relay_url(url: str) -> tuple[str, int]:
    """'tcp://host:port' -> (host, port), with one clear error for anything else."""
    parts = urlsplit(url)
    if parts.scheme != "tcp":
        raise ValueError(f"unsupported relay URL {url!r}: expected tcp://host:port")
    if not parts.hostname or parts.port is None:
        raise ValueError(f"relay URL {url!r} needs a host and a port (tcp://host:port)")
    return parts.hostname, parts.port


@dataclass(frozen=True)
class PeerInfo:
    rank: int
    endpoints: list[tuple[str, int]]
    observed: tuple[str, int]
    probe: tuple[str, int] | None = None  # where the relay's probe port saw it (NAT type detection)


class RelayConnection:
    """One framed connection to the relay.

    `sock`: an unconnected socket to connect from (a rank binds its shared
    port first, so the relay observes the port its peers must punch to).
    """

    def __init__(
        self,
        url: str,
        timeout: float = 10.0,
        source: tuple[str, int] | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        self.url = url
        host, port = parse_relay_url(url)
        try:
            if sock is None:
                self.sock = socket.create_connection((host, port), timeout=timeout, source_address=source)
            else:
                self.sock = sock
                sock.settimeout(timeout)
                sock.connect(_resolve(host, port))
        except OSError as exc:
            if sock is not None:
                sock.close()
            raise RelayError(f"cannot reach the relay at {url}: {exc}", "unreachable") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray()

    def send(self, kind: Kind, body: dict[str, Any] | None = None) -> None:
        try:
            self.sock.sendall(encode(kind, body))
        except OSError as exc:
            raise RelayError(f"lost the connection to the relay at {self.url}: {exc}", "lost") from None

    def recv(self, timeout: float | None) -> tuple[Kind, dict[str, Any]]:
        """Next frame (blocking up to `timeout`); ERROR frames are raised as RelayError."""
        self.sock.settimeout(timeout)
        try:
            kind, length = decode_header(self._read(HEADER_SIZE), MAX_SERVER_FRAME)
            body = decode_body(kind, self._read(length))
        except socket.timeout:
            raise
        except (OSError, ProtocolError) as exc:
            raise RelayError(f"lost the connection to the relay at {self.url}: {exc}", "lost") from None
        if kind is Kind.ERROR:
            raise RelayError(str(body.get("message", "relay error")), str(body.get("code", "error")), body)
        if kind is Kind.ABORT:
            raise Aborted(int(body.get("code", 1)), str(body.get("reason", "")), body.get("rank"))
        return kind, body

    def expect(self, want: Kind, timeout: float | None) -> dict[str, Any]:
        kind, body = self.recv(timeout)
        if kind is not want:
            raise RelayError(f"relay sent {kind.name} where {want.name} was expected", "protocol")
        return body

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(n - len(self._buf))
            if not chunk:
                raise ConnectionError("the relay closed the connection")
            self._buf += chunk
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def take_buffer(self) -> bytes:
        """Bytes read from the relay but not consumed yet (handed over with the socket)."""
        data, self._buf = bytes(self._buf), bytearray()
        return data

    def close(self) -> None:
        self.sock.close()


def _resolve(host: str, port: int) -> tuple[str, int]:
    info = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    return info[0][4][:2]


def route_source_ip(url: str) -> str:
    """The local address this machine would use to reach the relay (no packet is sent)."""
    host, port = parse_relay_url(url)
    try:
        target = _resolve(host, port)
        family = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(target)
            return probe.getsockname()[0]
    except OSError as exc:
        raise RelayError(f"cannot reach the relay at {url}: {exc}", "unreachable") from None


def observe(conn: RelayConnection, timeout: float) -> tuple[tuple[str, int], int | None]:
    """Before REGISTER: (where the relay sees this connection come from, the relay's probe port)."""
    conn.send(Kind.OBSERVE, {})
    try:
        body = conn.expect(Kind.OBSERVED, timeout)
    except socket.timeout:
        raise RelayError(f"the relay at {conn.url} did not answer within {timeout:g} s", "timeout") from None
    observed = body.get("observed")
    probe_port = body.get("probe_port")
    return (str(observed[0]), int(observed[1])), probe_port if isinstance(probe_port, int) else None


def probe_mapping(url: str, probe_port: int, sock: socket.socket, timeout: float = 2.0) -> tuple[str, int] | None:
    """Connect `sock` (bound to the shared port) to the relay's probe port: where does the relay see it?

    Behind a NAT that keeps one mapping per local port (cone), the answer
    equals what the main relay port observed; behind a symmetric NAT it
    differs. None when the probe fails (then the NAT type stays unknown).
    """
    host, _ = parse_relay_url(url)
    try:
        sock.settimeout(timeout)
        sock.connect(_resolve(host, probe_port))
        data = bytearray()
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        kind, length = decode_header(bytes(data[:HEADER_SIZE]), MAX_SERVER_FRAME)
        body = decode_body(kind, bytes(data[HEADER_SIZE : HEADER_SIZE + length]))
        observed = body["observed"]
        return str(observed[0]), int(observed[1])
    except (OSError, ProtocolError, KeyError, TypeError, ValueError, IndexError, struct.error):
        return None
    finally:
        sock.close()


def register(
    conn: RelayConnection,
    job: str,
    token: str,
    rank: int,
    incarnation: str,
    endpoints: list[tuple[str, int]],
    timeout: float,
    probe: tuple[str, int] | None = None,
) -> tuple[int, int, tuple[str, int]]:
    """Take a rank slot; returns (rank, size, the address the relay saw us come from)."""
    body: dict[str, Any] = {
        "job": job, "token": token, "rank": rank, "incarnation": incarnation, "endpoints": [list(e) for e in endpoints],
    }
    if probe is not None:
        body["probe"] = list(probe)
    conn.send(Kind.REGISTER, body)
    try:
        body = conn.expect(Kind.REGISTERED, timeout)
    except socket.timeout:
        raise RelayError(f"the relay at {conn.url} did not answer the registration within {timeout:g} s", "timeout") from None
    return body["rank"], body["size"], (body["observed"][0], body["observed"][1])


def wait_world(conn: RelayConnection, deadline: float) -> list[PeerInfo]:
    """Block until the relay publishes the world (or fails the job)."""
    remaining = max(0.0, deadline - time.monotonic())
    try:
        body = conn.expect(Kind.WORLD, remaining + 5.0)  # the relay enforces the deadline; this is a backstop
    except socket.timeout:
        raise RelayError("the relay never published the world", "timeout") from None
    return [
        PeerInfo(p["rank"], [tuple(e) for e in p["endpoints"]], tuple(p["observed"]), tuple(p["probe"]) if p.get("probe") else None)
        for p in body["peers"]
    ]
