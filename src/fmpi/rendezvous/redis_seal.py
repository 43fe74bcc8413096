"""Sealing what fmpi puts in Redis, so that a stranger with the Redis URL can neither read nor forge it.

A Redis server may be shared: anyone who can connect may SCAN, read and
write the job's keys. So every value fmpi writes there (mailbox chunks,
notices, launcher events, member records) is an AES-GCM envelope under a
key derived from the job token with HKDF; the token and anything that
gives the key never reach Redis (the join check stores a one-way digest
of a separate HKDF output, see ``join_proof``).

Envelope: ``version (1) | sender (i32) | session (16) | seq (u64) | ciphertext + tag``.

* session: 16 random bytes per ``Sealer`` (one per process and role). The
  AES key is HKDF(job key, kind + session), so two sealers never share a
  key, and the nonce is ``receiver (i32) + seq (u64)`` with ``seq`` counted
  per receiver: a nonce is never used twice under one key.
* associated data: job id, kind, sender, receiver; a chunk moved to another
  job, list or rank, or a sender rewritten, fails the tag.
* replays: an ``Opener`` keeps, per (kind, sender, session, receiver), the
  last sequence number it accepted; an envelope at or below it is refused.
  Data chunks must arrive in exact order (``seq == last + 1``): a gap means
  someone removed relayed data from Redis, which ``StreamGap`` reports.

What Redis still sees is described in docs/redis-relay.md.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
import threading
from collections import defaultdict

from ..util.notices import RepeatedNotice

try:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
except ImportError:  # (redis-py without it: the same advice as connect's)
    raise ImportError("a redis:// relay needs the cryptography package: pip install 'fmpi[redis]'") from None

VERSION = 1
HEADER = struct.Struct(">Bi16sQ")  # version, sender, session, seq
NONCE = struct.Struct(">iQ")  # receiver, seq: unique per (session key, receiver counter)
OVERHEAD = HEADER.size + 16  # bytes an envelope adds (header + GCM tag)
ALL = -1  # receiver of a broadcast (every rank's inbox and the launcher's events)
LAUNCHER = -2  # sender / receiver id of fmpirun
# what an envelope holds (part of its key and its AAD): relayed link data, notices and events, member records,
# server-side collective contributions
DATA, CONTROL, MEMBER, COLL = b"data", b"ctl", b"member", b"coll"
KNOWN_SESSIONS = 4096  # session keys an opener caches (a job has a handful of sealers per rank)


class Refused(ValueError):
    """An envelope that is not ours: forged, tampered, replayed or moved."""


class StreamGap(ValueError):
    """Relayed data from a sender skipped a sequence number: someone removed it from Redis."""


def _hkdf(secret: bytes, info: bytes, salt: bytes | None = None) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(secret)


class JobKey:
    """The job's key material, derived from its token (which stays in the processes)."""

    def __init__(self, token: str, job: str) -> None:
        self.job = job.encode()
        self._master = _hkdf(token.encode(), b"fmpi redis job key " + self.job, salt=b"fmpi-redis-v1")

    def session_key(self, kind: bytes, session: bytes) -> AESGCM:
        return AESGCM(_hkdf(self._master, b"fmpi redis session " + kind + b" " + session))

    def join_proof(self) -> str:
        """What a rank shows to register (Redis keeps only ``join_verifier``, a SHA-1 it cannot invert)."""
        return _hkdf(self._master, b"fmpi redis join proof").hex()

    def join_verifier(self) -> str:
        return hashlib.sha1(self.join_proof().encode()).hexdigest()  # what the script's redis.sha1hex computes

    def aad(self, kind: bytes, sender: int, receiver: int, context: bytes = b"") -> bytes:
        return b"fmpi-redis-v1\0" + self.job + b"\0" + kind + struct.pack(">ii", sender, receiver) + context


class Sealer:
    """Seals what one process sends as `sender` (a rank, or LAUNCHER). Thread-safe."""

    def __init__(self, key: JobKey, sender: int) -> None:
        self.key, self.sender = key, sender
        self.session = os.urandom(16)
        self._aead = {kind: key.session_key(kind, self.session) for kind in (DATA, CONTROL, MEMBER, COLL)}
        self._counters: dict[tuple[bytes, int], int] = defaultdict(int)
        self._lock = threading.Lock()

    def seal(self, kind: bytes, receiver: int, plaintext: bytes, context: bytes = b"") -> bytes:
        """The envelope of `plaintext` for `receiver`; `context` (bound, not sent) must be given again to open it."""
        with self._lock:
            self._counters[kind, receiver] += 1
            seq = self._counters[kind, receiver]
        header = HEADER.pack(VERSION, self.sender, self.session, seq)
        body = self._aead[kind].encrypt(NONCE.pack(receiver, seq), plaintext, self.key.aad(kind, self.sender, receiver, context))
        return header + body

    def seal_text(self, kind: bytes, receiver: int, plaintext: bytes) -> str:
        """An envelope as base64 text, for places that must hold JSON (a member record in the world)."""
        return base64.b64encode(self.seal(kind, receiver, plaintext)).decode()


class Opener:
    """Opens envelopes addressed to `me` (or broadcast), refusing forgeries and replays."""

    def __init__(self, key: JobKey, me: int) -> None:
        self.key, self.me = key, me
        self._aeads: dict[tuple[bytes, bytes], AESGCM] = {}
        self._last: dict[tuple[bytes, int, bytes, int], int] = {}
        self._lock = threading.Lock()

    def open(self, kind: bytes, envelope: bytes, receiver: int | None = None, ordered: bool = False,
             fresh: bool = True, context: bytes = b"") -> tuple[int, bytes]:
        """(sender, plaintext); Refused when it is not a fresh envelope of ours for `receiver` (default: me).

        `ordered`: the sender's envelopes to us must come one after the other (relayed data).
        `fresh`: refuse one already opened (off for records that are facts, read again in every world, and
        for collective contributions, bound to their round by `context` instead).
        """
        return self.open_any(kind, envelope, (self.me if receiver is None else receiver,), ordered, fresh, context)

    def open_any(self, kind: bytes, envelope: bytes, receivers: tuple[int, ...], ordered: bool = False,
                 fresh: bool = True, context: bytes = b"") -> tuple[int, bytes]:
        """As ``open``, for an envelope that may be addressed to any of `receivers` (me, or every rank)."""
        if len(envelope) < OVERHEAD:
            raise Refused(f"{len(envelope)} bytes, shorter than any sealed message")
        version, sender, session, seq = HEADER.unpack_from(envelope)
        if version != VERSION:
            raise Refused(f"unknown format version {version}")
        aead, body = self._aead(kind, session), memoryview(envelope)[HEADER.size :]
        for receiver in receivers:
            try:
                plain = aead.decrypt(NONCE.pack(receiver, seq), body, self.key.aad(kind, sender, receiver, context))
            except InvalidTag:
                continue
            self._keep(kind, session, aead)
            if fresh:
                self._check_fresh((kind, sender, session, receiver), seq, ordered)
            return sender, plain
        raise Refused(f"a message claiming to be from {_who(sender)} failed authentication")

    def open_text(self, kind: bytes, text: str, receiver: int, fresh: bool = True) -> tuple[int, bytes]:
        try:
            raw = base64.b64decode(text, validate=True)
        except (ValueError, TypeError):
            raise Refused("a record that is not a sealed envelope") from None
        return self.open(kind, raw, receiver, fresh=fresh)

    def _aead(self, kind: bytes, session: bytes) -> AESGCM:
        """The session's key: cached once an envelope of it opened (forged sessions are derived, never kept)."""
        return self._aeads.get((kind, session)) or self.key.session_key(kind, session)

    def _keep(self, kind: bytes, session: bytes, aead: AESGCM) -> None:
        if (kind, session) not in self._aeads:
            if len(self._aeads) >= KNOWN_SESSIONS:  # (a job has a handful of sessions per rank: a bound all the same)
                self._aeads.clear()
            self._aeads[kind, session] = aead

    def _check_fresh(self, stream: tuple[bytes, int, bytes, int], seq: int, ordered: bool) -> None:
        with self._lock:
            last = self._last.get(stream, 0)
            if seq <= last:
                raise Refused(f"a replay of message {seq} from {_who(stream[1])} (already had up to {last})")
            if ordered and seq != last + 1:
                self._last[stream] = seq  # (said once: the envelopes after it are in sequence again)
                raise StreamGap(
                    f"relayed data from {_who(stream[1])} skipped from message {last} to {seq}: "
                    "someone removed it from Redis"
                )
            self._last[stream] = seq


def _who(sender: int) -> str:
    return "fmpirun" if sender == LAUNCHER else "any rank" if sender == ALL else f"rank {sender}"


def refusal_notice(who: str) -> RepeatedNotice:
    """The once-per-10-s line a refused envelope prints (docs/troubleshooting.md quotes it)."""
    return RepeatedNotice(
        f"fmpi: {who}: refused a message in Redis that is not sealed with this job's key "
        "(forged, replayed or tampered; someone else writes to this job's keys)"
    )
