"""The envelopes of what fmpi puts in Redis: what a stranger cannot read, forge, move, replay or remove unseen."""

from __future__ import annotations

import hashlib

import pytest

from fmpi.rendezvous.redis_seal import (
    ALL,
    CONTROL,
    DATA,
    HEADER,
    LAUNCHER,
    OVERHEAD,
    JobKey,
    Opener,
    Refused,
    Sealer,
    StreamGap,
)

TOKEN, JOB = "t" * 32, "j0123456789abcdef"


def test_data_round_trips_encrypted_and_in_order():
    key = JobKey(TOKEN, JOB)
    sealer, opener = Sealer(key, 0), Opener(key, 1)
    secret = b"the plaintext marker " * 50
    envelopes = [sealer.seal(DATA, 1, secret + bytes([i])) for i in range(3)]
    assert all(secret[:20] not in e for e in envelopes)  # encrypted, not only signed
    assert len(envelopes[0]) == len(secret) + 1 + OVERHEAD
    assert [opener.open(DATA, e, ordered=True) for e in envelopes] == [(0, secret + bytes([i])) for i in range(3)]


def test_replays_tampering_moves_and_other_jobs_are_refused():
    key = JobKey(TOKEN, JOB)
    sealer, opener = Sealer(key, 0), Opener(key, 1)
    first = sealer.seal(DATA, 1, b"chunk")
    assert opener.open(DATA, first, ordered=True) == (0, b"chunk")
    with pytest.raises(Refused, match="replay"):
        opener.open(DATA, first, ordered=True)
    second = sealer.seal(DATA, 1, b"next")
    for position in range(len(second)):  # any bit of header, ciphertext or tag
        bad = bytearray(second)
        bad[position] ^= 0x10
        with pytest.raises(Refused):
            opener.open(DATA, bytes(bad), ordered=True)
    with pytest.raises(Refused):  # for rank 1, not rank 2
        Opener(key, 2).open(DATA, second)
    with pytest.raises(Refused):  # a data chunk is not a notice
        opener.open(CONTROL, second)
    with pytest.raises(Refused):  # the same token, another job
        Opener(JobKey(TOKEN, "jother"), 1).open(DATA, second)
    with pytest.raises(Refused):  # another token
        Opener(JobKey("x" * 32, JOB), 1).open(DATA, second)
    assert opener.open(DATA, second, ordered=True) == (0, b"next")  # the refusals consumed nothing


def test_a_removed_chunk_is_a_gap_not_silence():
    key = JobKey(TOKEN, JOB)
    sealer, opener = Sealer(key, 3), Opener(key, 1)
    one, _two, three, four = (sealer.seal(DATA, 1, bytes([i])) for i in range(4))
    opener.open(DATA, one, ordered=True)
    with pytest.raises(StreamGap, match="rank 3 skipped from message 1 to 3"):
        opener.open(DATA, three, ordered=True)
    assert opener.open(DATA, four, ordered=True) == (3, bytes([3]))  # one error per gap, not one per chunk after it


def test_nonces_never_repeat_under_one_key():
    key = JobKey(TOKEN, JOB)
    a, b = Sealer(key, 0), Sealer(key, 0)  # two processes of one rank: two sessions, two keys
    assert a.session != b.session
    seen = set()
    for sealer in (a, b):
        for receiver in (1, 2, ALL, LAUNCHER):
            for _ in range(3):
                _v, _s, session, seq = HEADER.unpack_from(sealer.seal(CONTROL, receiver, b"{}"))
                assert (session, receiver, seq) not in seen
                seen.add((session, receiver, seq))


def test_broadcasts_open_for_any_listed_receiver():
    key = JobKey(TOKEN, JOB)
    notice = Sealer(key, LAUNCHER).seal(CONTROL, ALL, b'{"kind":"abort"}')
    assert Opener(key, 2).open_any(CONTROL, notice, (2, ALL)) == (LAUNCHER, b'{"kind":"abort"}')
    with pytest.raises(Refused):
        Opener(key, 2).open_any(CONTROL, notice, (2, LAUNCHER))


def test_what_redis_stores_neither_is_nor_gives_the_token():
    key = JobKey(TOKEN, JOB)
    verifier = key.join_verifier()
    assert TOKEN not in verifier and hashlib.sha256(TOKEN.encode()).hexdigest() != verifier
    assert hashlib.sha1(key.join_proof().encode()).hexdigest() == verifier  # what the register script checks
    assert verifier != key.join_proof()  # reading the verifier does not let anyone join
