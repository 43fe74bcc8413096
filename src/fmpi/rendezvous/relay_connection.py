"""Blocking client of fmpi-relay, used by ranks (register, wait for the world) and launchers (create, watch).

``tls://host:port`` reaches a relay started with ``--tls-cert``: the
connection is wrapped in TLS and the relay's certificate is verified against
the system's trusted CAs, or only against ``FMPI_TLS_CA`` (a PEM file) when
that is set (a private CA, or a self-signed relay certificate).
"""

from __future__ import annotations

import socket
import ssl
import time
from typing import Any, Callable

from .. import settings
from ..wire.errors import Aborted, RelayError
from ..wire.frame_reader import FrameReader
from ..wire.relay_protocol import Kind, ProtocolError, decode_body, encode
from .urls import parse_relay_url, relay_scheme

TLS_CA_ENV = "FMPI_TLS_CA"


def tls_client_context() -> ssl.SSLContext:
    """What a client trusts in a relay: the system's CAs, or only the PEM file named by FMPI_TLS_CA."""
    cafile = settings.tls_ca()
    try:
        return ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        raise RelayError(f"cannot load the CA certificates in {TLS_CA_ENV}={cafile}: {exc}", "tls") from None


def _wrap_tls(sock: socket.socket, url: str, host: str) -> ssl.SSLSocket:
    """Handshake with the relay (under the socket's timeout) and verify its certificate; one clear error if not."""
    context = tls_client_context()
    try:
        return context.wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as exc:
        hint = (
            f"it is not signed by the CA in {TLS_CA_ENV}" if settings.tls_ca()
            else f"if it is signed by a private CA, set {TLS_CA_ENV}=/path/to/ca.pem"
        )
        raise RelayError(
            f"cannot reach the relay at {url}: its TLS certificate is not trusted ({exc.verify_message}); {hint}", "tls"
        ) from None
    except ssl.SSLError as exc:
        raise RelayError(
            f"cannot reach the relay at {url}: the TLS handshake failed ({exc.reason or exc}); is it an fmpi-relay "
            "started with --tls-cert? (a relay without TLS takes tcp://)", "tls"
        ) from None
    except (OSError, socket.timeout) as exc:
        raise RelayError(f"cannot reach the relay at {url}: the TLS handshake failed: {exc or 'timed out'}", "tls") from None


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
        if relay_scheme(url) == "tls":
            plain = self.sock
            try:
                self.sock = _wrap_tls(plain, url, host)
            except BaseException:
                plain.close()
                raise
        self._reader = FrameReader()
        self._heard = False  # a frame came back (see recv)
        self.reconnected = False  # a rejoin found the relay up: only the connection was new (see register)

    def send(self, kind: Kind, body: dict[str, Any] | None = None) -> None:
        try:
            self.sock.sendall(encode(kind, body))
        except OSError as exc:
            raise RelayError(f"lost the connection to the relay at {self.url}: {exc}", "lost") from None

    def recv(self, timeout: float | None) -> tuple[Kind, dict[str, Any]]:
        """Next frame (blocking up to `timeout`); ERROR frames are raised as RelayError."""
        self.sock.settimeout(timeout)
        try:
            kind = Kind.HEARTBEAT
            while kind is Kind.HEARTBEAT:  # (the transport takes heartbeats; nothing here waits for one)
                kind, payload = self.next_frame()
                body = decode_body(kind, payload)
        except socket.timeout:
            raise
        except ProtocolError as exc:
            if self._reader.head()[:1] in (b"\x15", b"\x16") and relay_scheme(self.url) == "tcp":  # a TLS alert or handshake record
                raise RelayError(
                    f"the relay at {self.url} speaks TLS: use tls://{self.url[len('tcp://'):]} "
                    "(and FMPI_TLS_CA=/path/to/ca.pem for a private CA)",
                    "tls",
                ) from None
            raise RelayError(f"lost the connection to the relay at {self.url}: {exc}", "lost") from None
        except OSError as exc:
            if not self._heard and relay_scheme(self.url) == "tcp":
                # A TLS relay drops a plain client's first frame without a word.
                raise RelayError(
                    f"the relay at {self.url} closed the connection without answering ({exc}); if it serves TLS "
                    f"(fmpi-relay --tls-cert), use tls://{self.url[len('tcp://'):]}", "lost",
                ) from None
            raise RelayError(f"lost the connection to the relay at {self.url}: {exc}", "lost") from None
        self._heard = True
        if kind is Kind.ERROR:
            raise RelayError(str(body.get("message", "relay error")), str(body.get("code", "error")), body)
        if kind is Kind.ABORT:
            raise Aborted.from_body(body)
        return kind, body

    def expect(self, want: Kind, timeout: float | None) -> dict[str, Any]:
        kind, body = self.recv(timeout)
        if kind is not want:
            raise RelayError(f"relay sent {kind.name} where {want.name} was expected", "protocol")
        return body

    def next_frame(self) -> tuple[Kind, bytearray]:
        """The next frame as it came (heartbeats included), its body undecoded."""
        while (frame := self._reader.next()) is None:
            # No more than the frame needs: what follows it belongs to whoever takes the socket next.
            with self._reader.buffer() as room:
                n = self.sock.recv_into(room)
            if not n:
                raise ConnectionError("the relay closed the connection")
            self._reader.advance(n)
        return frame

    def take_buffer(self) -> bytes:
        """Bytes read from the relay but not consumed yet (handed over with the socket).

        Over TLS that includes what OpenSSL decrypted and holds: epoll
        cannot report those bytes to the new owner.
        """
        if isinstance(self.sock, ssl.SSLSocket):
            while self.sock.pending():
                self._reader.feed(self.sock.recv(self.sock.pending()))
        return self._reader.take_rest()

    def close(self) -> None:
        self.sock.close()


def open_with(url: str, kind: Kind, body: dict[str, Any], timeout: float) -> RelayConnection:
    """Connect to the relay at `url` with the request `kind` and wait for CREATED: the connection, or one clear error."""
    conn = RelayConnection(url, timeout=timeout)
    try:
        conn.send(kind, body)
        conn.expect(Kind.CREATED, timeout)
    except socket.timeout:
        conn.close()
        raise RelayError(f"the relay at {url} did not answer {kind.name} within {timeout:g} s", "timeout") from None
    except BaseException:
        conn.close()
        raise
    return conn


def _resolve(host: str, port: int) -> tuple[str, int]:
    info = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    return info[0][4][:2]


def local_ip_towards(host: str, port: int, what: str) -> str:
    """The local address this machine would use to reach host:port, the server `what` names (no packet is sent)."""
    try:
        target = _resolve(host, port)
        family = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(target)  # a UDP connect only picks the route
            return probe.getsockname()[0]
    except OSError as exc:
        raise RelayError(f"cannot reach {what}: {exc}", "unreachable") from None


def route_source_ip(url: str) -> str:
    """The local address this machine would use to reach the relay (no packet is sent)."""
    host, port = parse_relay_url(url)
    return local_ip_towards(host, port, f"the relay at {url}")


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


#: The probe is tried this many times, each attempt this long: a lost SYN costs one attempt, not the detection.
PROBE_TRIES = 3
PROBE_TIMEOUT = 0.75


def probe_nat(url: str, probe_port: int, bind: Callable[[], socket.socket]) -> tuple[tuple[str, int] | None, str]:
    """Connect from the shared port (a socket `bind` makes) to the relay's probe port: where does the relay see it?

    Behind a NAT that keeps one mapping per local port (cone), the answer
    equals what the main relay port observed; behind a symmetric NAT it
    differs. Tried ``PROBE_TRIES`` times; (None, why) when no attempt got an
    answer (then the NAT kind is unknown), else (the address, "").
    """
    started = time.monotonic()
    failures: list[str] = []
    for _ in range(PROBE_TRIES):
        seen, why = _probe_once(url, probe_port, bind())
        if seen is not None:
            return seen, ""
        failures.append(why)
    host, _ = parse_relay_url(url)
    return None, (
        f"the relay's probe port {host}:{probe_port} did not answer ({'; '.join(dict.fromkeys(failures))}; "
        f"{PROBE_TRIES} tries in {time.monotonic() - started:.1f} s): a firewall may filter it"
    )


def _probe_once(url: str, probe_port: int, sock: socket.socket) -> tuple[tuple[str, int] | None, str]:
    host, _ = parse_relay_url(url)
    try:
        sock.settimeout(PROBE_TIMEOUT)
        sock.connect(_resolve(host, probe_port))
        reader = FrameReader()
        while (frame := reader.next()) is None:
            chunk = sock.recv(4096)
            if not chunk:
                return None, "closed before it answered"
            reader.feed(chunk)
        body = decode_body(*frame)
        observed = body["observed"]
        return (str(observed[0]), int(observed[1])), ""
    except socket.timeout:
        return None, "timed out"
    except OSError as exc:
        return None, exc.strerror or str(exc)
    except (ProtocolError, KeyError, TypeError, ValueError, IndexError) as exc:
        return None, f"a bad answer: {exc}"
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
    rejoin_as: tuple[str, int] | None = None,
    nat: dict[str, str] | None = None,
) -> tuple[int, int, tuple[str, int]]:
    """Take a rank slot; returns (rank, size, the address the relay saw us come from).

    `nat`: the kind of NAT this rank found it is behind, and why it is unknown
    if it is ({"kind": ..., "note": ...}: the launcher shows it).
    `rejoin_as`: this rank is taking its slot again, on a new connection: its
    old one broke, or the relay restarted (and the launcher re-created the job
    with ``resume``); the value is the address the relay first observed it at,
    which peers still punch to. ``reconnected`` (see ``rejoined``) tells which.
    """
    body: dict[str, Any] = {
        "job": job, "token": token, "rank": rank, "incarnation": incarnation, "endpoints": [list(e) for e in endpoints],
        "heartbeat": True,  # this rank beats once its world is out: the relay may count silence as death
    }
    if probe is not None:
        body["probe"] = list(probe)
    if nat is not None:
        body["nat"] = nat
    if rejoin_as is not None:
        body["resume"] = True
        body["observed"] = list(rejoin_as)
    conn.send(Kind.REGISTER, body)
    try:
        body = conn.expect(Kind.REGISTERED, timeout)
    except socket.timeout:
        raise RelayError(f"the relay at {conn.url} did not answer the registration within {timeout:g} s", "timeout") from None
    conn.reconnected = body.get("reconnected") is True
    return body["rank"], body["size"], (body["observed"][0], body["observed"][1])


def wait_world(conn: RelayConnection, deadline: float) -> int:
    """Block until the relay publishes the world (or fails the job); the job's size."""
    remaining = max(0.0, deadline - time.monotonic())
    try:
        body = conn.expect(Kind.WORLD, remaining + 5.0)  # the relay enforces the deadline; this is a backstop
    except socket.timeout:
        raise RelayError("the relay never published the world", "timeout") from None
    size = body.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise RelayError(f"the relay at {conn.url} sent a world without a valid size", "protocol")
    return size
