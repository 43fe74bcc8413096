"""Authenticated set-up of a rank-to-rank connection.

Whoever reaches a rank's listening (or punched) port must prove it belongs to
the job before a single data frame is accepted, and the connecting rank must
learn that it reached the right peer. Both sides know the job secret; neither
sends it. Four messages, two round trips:

    connector -> HELLO      magic, version, src rank, dst rank, nonce_c, host_c
    acceptor  -> CHALLENGE  kind, nonce_a, mac_a = HMAC(secret, "A" | nonce_c | nonce_a | src | dst), host_a
    connector -> CONFIRM    mac_c = HMAC(secret, "C" | nonce_a | nonce_c | src | dst), channel
    acceptor  -> VERDICT    verdict, mac_v = HMAC(secret, "V" | nonce_c | nonce_a | src | dst | verdict)

The acceptor's verdict settles which of two crossing connections survives
when both ranks connect at once (see ``Verdict``). It is decided only after
CONFIRM proved the connector a member of the job: a stranger that sends a
HELLO claiming a real rank and then stalls holds nothing of that pair (with
the verdict in the first answer, it held the pair for the whole handshake
timeout). CONFIRM tells the acceptor how the connector made the link (direct
connect or hole punch), so both ends report it the same way. Data may follow
VERDICT immediately.

``host_c`` and ``host_a`` are the two sides' ``shm_lane.host_key()``: when
they are equal (same host, same network namespace, lanes not turned off),
the link gets a shared-memory lane per direction, named after both nonces
(``Outcome.lane``). The keys are hints, not credentials: a forged one can
only make a reader look for a lane file that is not there, which fails the
link over like any read error.

Hole punching makes roles ambiguous: after a TCP simultaneous open *both*
ends called ``connect()`` and both send HELLO. ``initiate`` handles that: it
sends HELLO and looks at the first byte that comes back. A CHALLENGE (a kind
byte) means the peer accepted our connection in the ordinary way. A HELLO
(magic "F...") means a simultaneous open: the lower rank stays the connector,
the higher rank becomes the acceptor. Both ends apply the same rule, so
exactly one handshake runs. It runs one round trip shorter than the plain
one, because the HELLOs crossed: the acceptor's nonce is the one in its own
HELLO, so the connector, holding both nonces once the peer's HELLO is in,
sends CONFIRM at once instead of waiting for the CHALLENGE (which it still
checks: the acceptor must prove itself before the connector trusts the
VERDICT). From the first bytes to the connector's verdict: HELLOs cross,
CONFIRM and CHALLENGE cross, VERDICT - three one-way trips, not five.
Giving mac_c before seeing mac_a reveals nothing: it covers the connector's
fresh nonce, so it answers no other challenge (a stranger at the peer's
endpoint could relay it to that peer only by sitting in the path, where it
could relay the whole handshake anyway).

The acceptor's steps are also here without I/O (``Acceptance``), for the
listener, which runs them for any number of connections at once on the
progress thread (``acceptor.py``).
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
VERSION = 5  # 5: the shorter handshake of a simultaneous open
NONCE = 16
MAC = 16

HOST = 16  # shm_lane.host_key()
HELLO = struct.Struct(f"<4sHii{NONCE}s{HOST}s")
CHALLENGE = struct.Struct(f"<B{NONCE}s{MAC}s{HOST}s")
CONFIRM = struct.Struct(f"<{MAC}sB")
VERDICT = struct.Struct(f"<B{MAC}s")

#: CHALLENGE's first byte: a challenge, or "this connection meant another rank" (nothing else follows).
CHALLENGED = 0

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


def _mac(secret: bytes, label: bytes, first: bytes, second: bytes, src: int, dst: int, extra: bytes = b"") -> bytes:
    msg = label + first + second + struct.pack("<ii", src, dst) + extra
    return hmac.new(secret, msg, hashlib.sha256).digest()[:MAC]


def _confirm(secret: bytes, nonce_a: bytes, nonce_c: bytes, me: int, peer: int, channel: str) -> bytes:
    return CONFIRM.pack(_mac(secret, b"C", nonce_a, nonce_c, me, peer), CHANNEL_CODES[channel])


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
    a simultaneous open (we are the higher rank), once the peer proved itself;
    without it such a connection is refused. `host`: our ``shm_lane.host_key()``
    (NO_KEY: no lanes).
    """
    nonce_c = os.urandom(NONCE)
    sock.sendall(HELLO.pack(MAGIC, VERSION, me, peer, nonce_c, host))
    early_challenge = b""  # in a simultaneous open: the peer's HELLO nonce, which its CHALLENGE must carry
    first = _recv_exact(sock, 1)
    if first == MAGIC[:1]:
        hello = check_hello(first + _recv_exact(sock, HELLO.size - 1), me)
        if hello.src != peer:
            raise HandshakeError(f"the endpoint given for rank {peer} is rank {hello.src}")
        if me > peer:
            if decide is None:
                raise HandshakeError(f"unexpected simultaneous open with rank {peer}")
            return accept_side(sock, secret, me, hello, decide, host, nonce_a=nonce_c)
        early_challenge = hello.nonce
        sock.sendall(_confirm(secret, early_challenge, nonce_c, me, peer, channel))
        first = _recv_exact(sock, 1)  # the peer answers our HELLO next
    kind, nonce_a, mac_a, their_host = CHALLENGE.unpack(first + _recv_exact(sock, CHALLENGE.size - 1))
    if kind == Verdict.WRONG_RANK:
        raise HandshakeError(f"the endpoint given for rank {peer} belongs to another rank")
    if kind != CHALLENGED or not hmac.compare_digest(mac_a, _mac(secret, b"A", nonce_c, nonce_a, me, peer)):
        raise HandshakeError(f"the endpoint given for rank {peer} failed authentication (not a member of this job)")
    if not early_challenge:
        sock.sendall(_confirm(secret, nonce_a, nonce_c, me, peer, channel))
    elif nonce_a != early_challenge:
        raise HandshakeError(f"rank {peer} challenged with another nonce than its HELLO's")
    verdict_raw, mac_v = VERDICT.unpack(_recv_exact(sock, VERDICT.size))
    if not hmac.compare_digest(mac_v, _mac(secret, b"V", nonce_c, nonce_a, me, peer, bytes([verdict_raw]))):
        raise HandshakeError(f"rank {peer}'s verdict failed authentication")
    try:
        verdict = Verdict(verdict_raw)
    except ValueError:
        raise HandshakeError(f"unknown handshake verdict {verdict_raw}") from None
    return Outcome(verdict, "connector", channel, lane_stem(host, their_host, nonce_c, nonce_a))


@dataclass(frozen=True)
class Hello:
    src: int  # the rank the connector claims to be (not yet proven)
    nonce: bytes
    host: bytes


def check_hello(raw: bytes, me: int) -> Hello:
    magic, version, src, dst, nonce, host = HELLO.unpack(raw)
    if magic != MAGIC:
        raise HandshakeError("not an fmpi peer (bad magic)")
    if version != VERSION:
        raise HandshakeError(f"peer speaks link protocol version {version}, this rank speaks {VERSION}")
    if dst != me:
        raise HandshakeError(f"connection meant for rank {dst} reached rank {me}")
    return Hello(src, nonce, host)


def wrong_rank_answer(raw: bytes, me: int) -> bytes:
    """What to send back for a HELLO of this protocol meant for another rank (b"" for anything else)."""
    magic, version, _src, dst, _nonce, _host = HELLO.unpack(raw)
    if magic == MAGIC and version == VERSION and dst != me:
        return CHALLENGE.pack(Verdict.WRONG_RANK, bytes(NONCE), bytes(MAC), NO_KEY)
    return b""


def read_hello(sock: socket.socket, me: int) -> Hello:
    """Acceptor: read HELLO (what it claims; ``accept_side`` proves it)."""
    raw = _recv_exact(sock, HELLO.size)
    answer = wrong_rank_answer(raw, me)
    if answer:
        sock.sendall(answer)
    return check_hello(raw, me)


class Acceptance:
    """The acceptor's half after HELLO, without I/O: `challenge` to send, then `confirmed` with the CONFIRM that came
    back (raises HandshakeError unless the connector proved itself), then `verdict` to send."""

    def __init__(self, secret: bytes, me: int, hello: Hello, host: bytes = NO_KEY, nonce_a: bytes = b"") -> None:
        self._secret, self._me, self.hello, self._host = secret, me, hello, host
        self._nonce_a = nonce_a or os.urandom(NONCE)
        self.challenge = CHALLENGE.pack(
            CHALLENGED, self._nonce_a, _mac(secret, b"A", hello.nonce, self._nonce_a, hello.src, me), host
        )

    def confirmed(self, raw: bytes) -> str:
        """Check CONFIRM; the channel the connector made the link by."""
        mac_c, code = CONFIRM.unpack(raw)
        src = self.hello.src
        if not hmac.compare_digest(mac_c, _mac(self._secret, b"C", self._nonce_a, self.hello.nonce, src, self._me)):
            raise HandshakeError(f"a connection claiming to be rank {src} failed authentication")
        return CHANNEL_NAMES.get(code, "direct")

    def verdict(self, verdict: Verdict) -> bytes:
        nonces = (self.hello.nonce, self._nonce_a)
        return VERDICT.pack(verdict, _mac(self._secret, b"V", *nonces, self.hello.src, self._me, bytes([verdict])))

    def lane(self) -> str:
        return lane_stem(self._host, self.hello.host, self.hello.nonce, self._nonce_a)


def accept_side(
    sock: socket.socket, secret: bytes, me: int, hello: Hello, decide: Callable[[], Verdict], host: bytes = NO_KEY,
    nonce_a: bytes = b"",
) -> Outcome:
    """Acceptor (blocking): challenge `hello`, check CONFIRM, then answer with ``decide()`` (called only for a
    connector that proved itself); the outcome has the connector's channel. `nonce_a`: the challenge's nonce
    (in a simultaneous open, the one of our own HELLO; otherwise a fresh one)."""
    acceptance = Acceptance(secret, me, hello, host, nonce_a)
    sock.sendall(acceptance.challenge)
    channel = acceptance.confirmed(_recv_exact(sock, CONFIRM.size))
    verdict = decide()
    sock.sendall(acceptance.verdict(verdict))
    if verdict is not Verdict.ACCEPT:
        return Outcome(verdict, "acceptor", "")
    return Outcome(verdict, "acceptor", channel, acceptance.lane())
