"""Shared-memory lanes between ranks on one host: the ring, the handshake that sets it up, engines using it.

The engines here are real (loopback TCP for headers, files in /dev/shm for
payloads); a lane of a few hundred KiB makes the ring wrap, fill up and fall
back to inline frames with small data.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import uuid

import numpy as np
import pytest
from relayed_world import RelayedWorld

from fmpi.transport.engine import Engine
from fmpi.transport.links.handshake import Verdict, accept_side, initiate, read_hello
from fmpi.transport.links.shm_lane import (
    LANE_MIN,
    NO_KEY,
    LaneError,
    LaneReader,
    LaneWriter,
    host_key,
    lane_path,
)
from fmpi.transport.options import TransportOptions

SECRET = b"s" * 32


@pytest.fixture
def path():
    p = lane_path(uuid.uuid4().hex, 0, 1)
    yield p
    if os.path.exists(p):
        os.unlink(p)


def _bytes(seed: int, n: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


# ------------------------------------------------------------------ the ring
def test_the_ring_wraps_without_splitting_a_payload_and_refuses_what_does_not_fit(path):
    w, r = LaneWriter(path, 1000), LaneReader(path, 1000)
    one, two, three = _bytes(1, 400), _bytes(2, 400), _bytes(3, 400)
    assert bytes(w.place([memoryview(one[:150]), memoryview(one[150:])], 400)) == one  # parts are concatenated
    assert w.place([memoryview(two)], 400) is not None
    # 800 used; the next 400 would start at 0 after skipping 200, but 0..399 is still unread
    assert w.place([memoryview(three)], 400) is None
    assert bytes(r.take(400)) == one
    r.release()
    assert w.place([memoryview(three)], 400) is not None  # now it fits, at offset 0
    assert bytes(r.take(400)) == two
    r.release()
    assert bytes(r.take(400)) == three  # the reader skips the same 200-byte gap
    r.release()
    assert w.place([memoryview(_bytes(4, 1001))], 1001) is None  # larger than the ring: inline


def test_a_held_payload_stays_intact_until_dropped_and_frees_the_ring_in_order(path):
    """A payload nobody has asked for yet stays in the ring (``hold``): the writer never reuses its
    bytes, whatever else is released after it, until it is dropped; drops may come in any order."""
    w, r = LaneWriter(path, 1000), LaneReader(path, 1000)
    a, b, c, d = _bytes(1, 300), _bytes(2, 300), _bytes(3, 300), _bytes(4, 300)
    for m in (a, b):
        assert w.place([memoryview(m)], 300) is not None
    held_a = r.take(300)
    token_a = r.hold()
    assert r.kept
    r.release()
    assert bytes(r.take(300)) == b and not r.kept
    r.release()  # b is done, but a still holds the ring from offset 0
    assert w.place([memoryview(c)], 300) is not None  # 600..899: free
    assert w.place([memoryview(d)], 300) is None  # would wrap onto a
    held_c = r.take(300)
    token_c = r.hold()
    r.release()
    r.drop(token_c)  # out of order: a is still held, nothing is freed
    assert w.place([memoryview(d)], 300) is None
    assert bytes(held_a) == a and bytes(held_c) == c
    r.drop(token_a)
    assert w.place([memoryview(d)], 300) is not None  # wraps to offset 0
    assert bytes(r.take(300)) == d
    r.release()


def test_the_reader_unlinks_the_file_and_the_writer_cleans_up_an_unread_one(path):
    w = LaneWriter(path, 4096)
    w.place([memoryview(b"x" * 100)], 100)
    assert os.path.exists(path)
    r = LaneReader(path, 4096)
    assert bytes(r.take(100)) == b"x" * 100
    assert not os.path.exists(path)  # mapped by both, gone from /dev/shm

    other = lane_path(uuid.uuid4().hex, 1, 0)
    w2 = LaneWriter(other, 4096)
    w2.place([memoryview(b"y" * 100)], 100)
    assert os.path.exists(other)
    w2.close()  # the link closed before the reader ever opened it
    assert not os.path.exists(other)


def test_a_reader_refuses_a_missing_or_foreign_lane(path):
    with pytest.raises(LaneError, match="cannot open"):
        LaneReader(path, 4096).take(10)
    with open(path, "wb") as f:
        f.write(b"\0" * 100)  # not a lane of this size
    with pytest.raises(LaneError, match="wrong size"):
        LaneReader(path, 4096).take(10)


def test_a_writer_never_writes_into_a_file_someone_else_made(path):
    with open(path, "wb") as f:
        f.write(b"squatter")
    w = LaneWriter(path, 4096)
    assert w.place([memoryview(b"secret" * 10)], 60) is None  # O_EXCL: every frame goes inline
    with open(path, "rb") as f:
        assert f.read() == b"squatter"


# ------------------------------------------------------------- the handshake
@pytest.mark.parametrize(
    "keys, lanes",
    [((b"k" * 16, b"k" * 16), True), ((b"k" * 16, b"j" * 16), False), ((NO_KEY, NO_KEY), False)],
)
def test_the_handshake_gives_both_ends_the_same_lane_stem_only_for_matching_hosts(keys, lanes):
    a, b = socket.socketpair()
    result = {}

    def acceptor() -> None:
        hello = read_hello(b, 1)
        result["b"] = accept_side(b, SECRET, 1, hello, lambda: Verdict.ACCEPT, keys[1])

    t = threading.Thread(target=acceptor)
    t.start()
    result["a"] = initiate(a, SECRET, 0, 1, "direct", None, keys[0])
    t.join(10)
    a.close(), b.close()
    assert result["a"].lane == result["b"].lane
    assert bool(result["a"].lane) is lanes


def test_host_key_names_this_host_and_network_namespace():
    assert host_key() == host_key() != NO_KEY  # (tests/natpunch: another namespace has another key)


# ------------------------------------------------------------------ engines
@pytest.fixture
def pair():
    made: list[Engine] = []

    def make(**options) -> tuple[Engine, Engine]:
        listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
        endpoints = [l.getsockname() for l in listeners]
        opts = TransportOptions(**options)
        engines = [Engine(r, 2, SECRET, lambda peer: [endpoints[peer]], listeners[r], options=opts) for r in range(2)]
        made.extend(engines)
        return engines[0], engines[1]

    yield make
    for e in made:
        e.abandon()


SIZES = [LANE_MIN, 5000, 100_000, 300_000, LANE_MIN + 1, 200_000, 0, 64_000]  # 300 KB: larger than the lane


@pytest.mark.parametrize("capacity", [256 * 1024, 0])
def test_large_payloads_take_the_lane_in_order_falling_back_inline_when_it_is_full(pair, capacity):
    a, b = pair(lane_capacity=capacity)
    a.wait(a.isend(1, 0, 1, [memoryview(b"up")]), timeout=10)  # frames sent before the link is up go inline
    b.wait(b.irecv(0, 0, 1, None), timeout=10)
    messages = [_bytes(i, SIZES[i % len(SIZES)]) for i in range(40)]
    sends = [a.isend(1, 0, 3, [memoryview(m)]) for m in messages]  # nobody reads yet: the lane fills up
    a.wait_all(sends, timeout=30)
    got = []
    for _ in messages:
        op = b.irecv(0, 0, 3, None)
        b.wait(op, timeout=30)
        got.append(bytes(op.payload))
    assert got == messages
    # into posted buffers too (the usual case of a collective), both ways
    data = np.random.default_rng(7).random(20_000)  # 160 KB
    out = np.empty_like(data)
    recv = a.irecv(1, 0, 4, memoryview(out).cast("B"))
    b.wait(b.isend(0, 0, 4, [memoryview(data).cast("B")]), timeout=30)
    a.wait(recv, timeout=30)
    assert np.array_equal(out, data)
    (stats,) = a.link_stats()
    payload = sum(map(len, messages))
    if capacity:
        assert stats["shared_memory"] is True
        # the link carried the headers, the small and oversized payloads, the overflow: far from all
        assert a.traffic()["sent"] < payload
    else:
        assert stats["shared_memory"] is False
        assert a.traffic()["sent"] >= payload


def test_a_payload_that_arrives_before_its_receive_waits_in_the_lane_and_arrives_intact(pair):
    """An unexpected lane payload is not copied out at once: it waits in the ring for its receive.
    Later traffic must not overwrite it (it goes inline while the ring is full behind it), a receive
    without a buffer gets a private copy, and once received the ring carries payloads again."""
    a, b = pair(lane_capacity=256 * 1024)
    a.wait(a.isend(1, 0, 1, [memoryview(b"up")]), timeout=10)
    b.wait(b.irecv(0, 0, 1, None), timeout=10)
    early = _bytes(5, 100_000)
    a.wait(a.isend(1, 0, 5, [memoryview(early)]), timeout=10)
    probe = None
    deadline = time.monotonic() + 10
    while probe is None and time.monotonic() < deadline:  # (until b has read it: then it is in the lane, held)
        probe = b.iprobe(0, 0, 5)
        time.sleep(0.001)
    assert probe == (0, 5, 100_000)
    later = [_bytes(10 + i, 100_000) for i in range(6)]  # 600 KB through a 256 KiB ring
    sent = a.traffic()["sent"]
    for i, m in enumerate(later):
        out = bytearray(100_000)
        recv = b.irecv(0, 0, 6, memoryview(out))
        a.wait(a.isend(1, 0, 6, [memoryview(m)]), timeout=10)
        b.wait(recv, timeout=10)
        assert bytes(out) == m, f"later message {i}"
    assert a.traffic()["sent"] - sent >= 100_000  # (some had to go inline: the held one blocked the ring)
    loose = _bytes(6, 50_000)
    a.wait(a.isend(1, 0, 7, [memoryview(loose)]), timeout=10)
    while b.iprobe(0, 0, 7) is None:
        time.sleep(0.001)
    got = b.irecv(0, 0, 7, None)  # (no buffer: the engine's own copy, not a view of the ring)
    b.wait(got, timeout=10)
    assert isinstance(got.payload, bytearray) and bytes(got.payload) == loose
    out = bytearray(100_000)
    b.wait(b.irecv(0, 0, 5, memoryview(out)), timeout=10)
    assert bytes(out) == early
    for i, m in enumerate(later):  # the ring wraps over where both waited
        recv = b.irecv(0, 0, 8, None)
        a.wait(a.isend(1, 0, 8, [memoryview(m)]), timeout=10)
        b.wait(recv, timeout=10)
        assert bytes(recv.payload) == m
    assert bytes(got.payload) == loose  # the private copy is untouched by the ring's reuse
    sent = a.traffic()["sent"]
    a.wait(a.isend(1, 0, 9, [memoryview(early)]), timeout=10)
    b.wait(b.irecv(0, 0, 9, None), timeout=10)
    assert a.traffic()["sent"] - sent < 1000  # freed: the payload took the lane, only its header the link


def test_no_lane_file_is_left_behind(pair):
    before = {f for f in os.listdir("/dev/shm") if f.startswith("fmpi-lane-")}
    a, b = pair(lane_capacity=1 << 20)
    a.wait(a.isend(1, 0, 1, [memoryview(_bytes(1, 100_000))]), timeout=10)
    b.wait(b.irecv(0, 0, 1, None), timeout=10)
    b.wait(b.isend(0, 0, 2, [memoryview(_bytes(2, 100_000))]), timeout=10)  # (a never receives it)
    a.close(timeout=5), b.close(timeout=5)
    assert {f for f in os.listdir("/dev/shm") if f.startswith("fmpi-lane-")} == before


def test_a_link_dying_with_payloads_in_its_lanes_loses_and_duplicates_nothing():
    w = RelayedWorld(2, TransportOptions(lane_capacity=512 * 1024, ack_delay=0.01))
    try:
        n = 300
        sizes = [[LANE_MIN, 40_000, 3000, 120_000, 70_000][i % 5] for i in range(n)]
        linked = threading.Barrier(2, timeout=10)

        def body(r, e):
            peer = 1 - r
            e.wait(e.isend(peer, 0, 1, [memoryview(b"hi")]), timeout=10)
            e.wait(e.irecv(peer, 0, 1, None), timeout=10)
            assert e.link_stats()[0]["shared_memory"] is True
            linked.wait()
            recvs = [e.irecv(peer, 0, 2, None) for _ in range(n)]
            sends = []
            for i, size in enumerate(sizes):
                sends.append(e.isend(peer, 0, 2, [memoryview(_bytes(r * 1000 + i, size))]))
                if i == n // 3 and r == 0:
                    e.core.peers[peer].link.sock.shutdown(socket.SHUT_RDWR)
            e.wait_all(sends, timeout=60)
            e.wait_all(recvs, timeout=60)
            for i, op in enumerate(recvs):
                assert bytes(op.payload) == _bytes(peer * 1000 + i, sizes[i]), f"message {i} is wrong"

        w.run(body)
        for e in w.engines:
            (stats,) = e.link_stats()
            assert stats["kind"] == "relayed" and stats["failovers"] == 1 and stats["shared_memory"] is False
    finally:
        w.close()


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs, like the small /dev/shm of a container (mounting needs root, as the NAT lab does)."""
    mount = tmp_path / "shm"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)  # (lazy: a test may still map a file there)


def test_a_lane_that_does_not_fit_in_shared_memory_means_inline_frames_not_a_crash(small_tmpfs):
    w = LaneWriter(str(small_tmpfs / "lane"), 4 << 20)  # 4 MiB in a 1 MiB tmpfs
    assert w.place([memoryview(_bytes(1, 100_000))], 100_000) is None
    assert w.place([memoryview(_bytes(2, 100_000))], 100_000) is None  # and it does not try again
    assert not os.listdir(small_tmpfs)
    fits = LaneWriter(str(small_tmpfs / "fits"), 256 * 1024)
    assert bytes(fits.place([memoryview(_bytes(3, 100_000))], 100_000)) == _bytes(3, 100_000)
