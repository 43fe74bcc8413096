"""Authenticated set-up of a rank-to-rank connection.

Whoever reaches a rank's listening (or punched) port must prove it belongs to
the job before a single data frame is accepted, and the connecting rank must
learn that it reached the right peer. Both sides know the job secret; neither
sends it. Three messages, one and a half round trips:

    connector -> HELLO    magic, version, src rank, dst rank, nonce_c, host_c
    acceptor  -> REPLY    verdict, nonce_a, mac_a = HMAC(secret, "A" | nonce_c | nonce_a | src | dst), host_a
    connector -> CONFIRM  mac_c = HMAC(secret, "C" | nonce_a | nonce_c | src | dst), channel

The acceptor's verdict also settles which of two crossing connections
survives when both ranks connect at once (see ``Verdict``). CONFIRM tells the
acceptor how the connector made the link (direct connect or hole punch), so
both ends report it the same way. Data may follow CONFIRM immediately.

``host_c`` and ``host_a`` are the two sides' ``shm_lane.host_key()``: when
they are equal (same host, same network namespace, lanes not turned off),
the link gets a shared-memory lane per direction, named after both nonces
(``Outcome.lane``). The keys are hints, not credentials: a forged one can
only make a reader look for a lane file that is not there, which fails the
link over like any read error.

Hole punching makes roles ambiguous: after a TCP simultaneous open *both*
ends called ``connect()`` and both send HELLO. ``initiate`` handles that: it
sends HELLO and looks at the first byte that comes back. A REPLY (a verdict
byte) means the peer accepted our connection in the ordinary way. A HELLO
(magic "F...") means a simultaneous open: the lower rank stays the connector
(it skips the peer's HELLO and reads the REPLY to its own), the higher rank
becomes the acceptor (it answers the peer's HELLO; its own HELLO is the one
skipped). Both ends apply the same rule, so exactly one handshake runs.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import socket
import struct
from dataclasses import dataclass
from typing import Callable

from .shm_lane import NO_KEY

MAGIC = b"FMPI"
VERSION = 3
NONCE = 16
MAC = 16

HOST = 16  # shm_lane.host_key()
HELLO = struct.Struct(f"<4sHii{NONCE}s{HOST}s")
REPLY = struct.Struct(f"<B{NONCE}s{MAC}s{HOST}s")
CONFIRM = struct.Struct(f"<{MAC}sB")

#: How the connector made the link, as carried in CONFIRM.
CHANNEL_CODES = {"direct": 0, "punched": 1}
CHANNEL_NAMES = {v: k for k, v in CHANNEL_CODES.items()}


class Verdict(enum.IntEnum):
    ACCEPT = 0
    TIE_LOST = 1  # both ranks are connecting; the lower rank's connection wins
    DUPLICATE = 2  # a link (or another set-up) to this rank already exists
    WRONG_RANK = 3  # the connector meant somebody else


class HandshakeError(Exception):
    """The other side is not a member of this job, or broke the protocol."""


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    role: str  # "connector" or "acceptor": which half this side ended up running
    channel: str  # how the link was made (only meaningful with ACCEPT)
    lane: str = ""  # the stem of the link's shared-memory lane names ("": no lanes; shm_lane.lane_path)


def lane_stem(my_host: bytes, their_host: bytes, nonce_c: bytes, nonce_a: bytes) -> str:
    """The lane name stem both ends derive, or "" when they cannot share memory."""
    if my_host != their_host or my_host == NO_KEY:
        return ""
    return hashlib.sha256(nonce_c + nonce_a).hexdigest()[:24]


def _mac(secret: bytes, label: bytes, first: bytes, second: bytes, src: int, dst: int) -> bytes:
    msg = label + first + second + struct.pack("<ii", src, dst)
    return hmac.new(secret, msg, hashlib.sha256).digest()[:MAC]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise HandshakeError("peer closed the connection during the handshake")
        data += chunk
    return bytes(data)


def initiate(
    sock: socket.socket,
    secret: bytes,
    me: int,
    peer: int,
    channel: str = "direct",
    decide: Callable[[], Verdict] | None = None,
    host: bytes = NO_KEY,
) -> Outcome:
    """Our half on a connection we opened (connected, blocking, with a timeout set).

    `decide` gives the verdict if this side turns out to be the acceptor of
    a simultaneous open (we are the higher rank); without it such a
    connection is refused. `host`: our ``shm_lane.host_key()`` (NO_KEY: no lanes).
    """
    nonce_c = os.urandom(NONCE)
    sock.sendall(HELLO.pack(MAGIC, VERSION, me, peer, nonce_c, host))
    first = _recv_exact(sock, 1)
    if first == MAGIC[:1]:
        hello = _check_hello(first + _recv_exact(sock, HELLO.size - 1), me)
        if hello.src != peer:
            raise HandshakeError(f"the endpoint given for rank {peer} is rank {hello.src}")
        if me > peer:
            if decide is None:
                raise HandshakeError(f"unexpected simultaneous open with rank {peer}")
            return accept_side(sock, secret, me, hello, decide(), host)
        first = _recv_exact(sock, 1)  # the peer answers our HELLO next
    verdict_raw, nonce_a, mac_a, their_host = REPLY.unpack(first + _recv_exact(sock, REPLY.size - 1))
    if not hmac.compare_digest(mac_a, _mac(secret, b"A", nonce_c, nonce_a, me, peer)):
        if verdict_raw == Verdict.WRONG_RANK:
            raise HandshakeError(f"the endpoint given for rank {peer} belongs to another rank")
        raise HandshakeError(f"the endpoint given for rank {peer} failed authentication (not a member of this job)")
    try:
        verdict = Verdict(verdict_raw)
    except ValueError:
        raise HandshakeError(f"unknown handshake verdict {verdict_raw}") from None
    if verdict is Verdict.ACCEPT:
        sock.sendall(CONFIRM.pack(_mac(secret, b"C", nonce_a, nonce_c, me, peer), CHANNEL_CODES[channel]))
    return Outcome(verdict, "connector", channel, lane_stem(host, their_host, nonce_c, nonce_a))


def connect_side(sock: socket.socket, secret: bytes, me: int, peer: int, channel: str = "direct") -> Verdict:
    """The connector's half on a plainly connected socket; returns the acceptor's verdict."""
    return initiate(sock, secret, me, peer, channel).verdict


@dataclass(frozen=True)
class Hello:
    src: int  # the rank the connector claims to be (not yet proven)
    nonce: bytes
    host: bytes


def _check_hello(raw: bytes, me: int) -> Hello:
    magic, version, src, dst, nonce, host = HELLO.unpack(raw)
    if magic != MAGIC:
        raise HandshakeError("not an fmpi peer (bad magic)")
    if version != VERSION:
        raise HandshakeError(f"peer speaks link protocol version {version}, this rank speaks {VERSION}")
    if dst != me:
        raise HandshakeError(f"connection meant for rank {dst} reached rank {me}")
    return Hello(src, nonce, host)


def read_hello(sock: socket.socket, me: int) -> Hello:
    """Acceptor: read HELLO (what it claims; ``accept_side`` proves it)."""
    raw = _recv_exact(sock, HELLO.size)
    magic, version, _src, dst, _nonce, _host = HELLO.unpack(raw)
    if magic == MAGIC and version == VERSION and dst != me:
        sock.sendall(REPLY.pack(Verdict.WRONG_RANK, bytes(NONCE), bytes(MAC), NO_KEY))
    return _check_hello(raw, me)


def accept_side(
    sock: socket.socket, secret: bytes, me: int, hello: Hello, verdict: Verdict, host: bytes = NO_KEY
) -> Outcome:
    """Acceptor: answer `hello` with `verdict`; on ACCEPT, verify CONFIRM (the outcome has the connector's channel)."""
    nonce_a = os.urandom(NONCE)
    src, nonce_c = hello.src, hello.nonce
    sock.sendall(REPLY.pack(verdict, nonce_a, _mac(secret, b"A", nonce_c, nonce_a, src, me), host))
    if verdict is not Verdict.ACCEPT:
        return Outcome(verdict, "acceptor", "")
    mac_c, code = CONFIRM.unpack(_recv_exact(sock, CONFIRM.size))
    if not hmac.compare_digest(mac_c, _mac(secret, b"C", nonce_a, nonce_c, src, me)):
        raise HandshakeError(f"a connection claiming to be rank {src} failed authentication")
    channel = CHANNEL_NAMES.get(code, "direct")
    return Outcome(verdict, "acceptor", channel, lane_stem(host, hello.host, nonce_c, nonce_a))
