"""Authenticated set-up of a rank-to-rank connection.

Whoever reaches a rank's listening (or punched) port must prove it belongs to
the job before a single data frame is accepted, and the connecting rank must
learn that it reached the right peer. Both sides know the job secret; neither
sends it. Three messages, one and a half round trips:

    connector -> HELLO    magic, version, src rank, dst rank, nonce_c
    acceptor  -> REPLY    verdict, nonce_a, mac_a = HMAC(secret, "A" | nonce_c | nonce_a | src | dst)
    connector -> CONFIRM  mac_c = HMAC(secret, "C" | nonce_a | nonce_c | src | dst)

The acceptor's verdict also settles which of two crossing connections
survives when both ranks connect at once (see ``Verdict``). Data may follow
CONFIRM immediately.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import socket
import struct

MAGIC = b"FMPI"
VERSION = 1
NONCE = 16
MAC = 16

HELLO = struct.Struct(f"<4sHii{NONCE}s")
REPLY = struct.Struct(f"<B{NONCE}s{MAC}s")
CONFIRM = struct.Struct(f"<{MAC}s")


class Verdict(enum.IntEnum):
    ACCEPT = 0
    TIE_LOST = 1  # both ranks are connecting; the lower rank's connection wins
    DUPLICATE = 2  # a link (or another set-up) to this rank already exists
    WRONG_RANK = 3  # the connector meant somebody else


class HandshakeError(Exception):
    """The other side is not a member of this job, or broke the protocol."""


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


def connect_side(sock: socket.socket, secret: bytes, me: int, peer: int) -> Verdict:
    """Run the connector's half on a connected blocking socket (with a timeout set).

    Returns the acceptor's verdict; only ACCEPT leaves a usable link.
    """
    nonce_c = os.urandom(NONCE)
    sock.sendall(HELLO.pack(MAGIC, VERSION, me, peer, nonce_c))
    verdict_raw, nonce_a, mac_a = REPLY.unpack(_recv_exact(sock, REPLY.size))
    if not hmac.compare_digest(mac_a, _mac(secret, b"A", nonce_c, nonce_a, me, peer)):
        raise HandshakeError(f"the endpoint given for rank {peer} failed authentication (not a member of this job)")
    try:
        verdict = Verdict(verdict_raw)
    except ValueError:
        raise HandshakeError(f"unknown handshake verdict {verdict_raw}") from None
    if verdict is Verdict.ACCEPT:
        sock.sendall(CONFIRM.pack(_mac(secret, b"C", nonce_a, nonce_c, me, peer)))
    return verdict


def read_hello(sock: socket.socket, me: int) -> tuple[int, bytes]:
    """Acceptor: read HELLO; returns (claimed source rank, connector nonce)."""
    magic, version, src, dst, nonce_c = HELLO.unpack(_recv_exact(sock, HELLO.size))
    if magic != MAGIC:
        raise HandshakeError("not an fmpi peer (bad magic)")
    if version != VERSION:
        raise HandshakeError(f"peer speaks link protocol version {version}, this rank speaks {VERSION}")
    if dst != me:
        sock.sendall(REPLY.pack(Verdict.WRONG_RANK, bytes(NONCE), bytes(MAC)))
        raise HandshakeError(f"connection meant for rank {dst} reached rank {me}")
    return src, nonce_c


def accept_side(sock: socket.socket, secret: bytes, me: int, src: int, nonce_c: bytes, verdict: Verdict) -> None:
    """Acceptor: answer HELLO with `verdict`; on ACCEPT, verify the connector's CONFIRM."""
    nonce_a = os.urandom(NONCE)
    sock.sendall(REPLY.pack(verdict, nonce_a, _mac(secret, b"A", nonce_c, nonce_a, src, me)))
    if verdict is not Verdict.ACCEPT:
        return
    (mac_c,) = CONFIRM.unpack(_recv_exact(sock, CONFIRM.size))
    if not hmac.compare_digest(mac_c, _mac(secret, b"C", nonce_a, nonce_c, src, me)):
        raise HandshakeError(f"a connection claiming to be rank {src} failed authentication")
