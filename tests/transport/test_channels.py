"""Per-link channels over loopback with a real relay: direct, punched, relayed, and failover between them.

The ranks join through the real bootstrap (shared port, relay registration),
so every channel is made exactly as in a job; only the NATs are missing
(those are in tests/nat).
"""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

from relayed_world import RelayedWorld

from fmpi.transport.options import TransportOptions
from fmpi.transport.requests import TransportError

# Small thresholds so that every branch runs with small data: multi-chunk
# relayed frames, copied and referenced (complete-on-ACK) messages.
SMALL = dict(relay_chunk=4096, copy_limit=1024, ack_delay=0.01)


@pytest.fixture
def world():
    made: list[RelayedWorld] = []

    def make(n: int, **options) -> RelayedWorld:
        w = RelayedWorld(n, TransportOptions(**{**SMALL, **options}))
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


def _pattern(src: int, i: int, size: int) -> np.ndarray:
    return np.full(size, (src * 31 + i) % 251, dtype=np.uint8)


def _all_to_all(sizes: list[int], sync_every: int = 0):
    """Every rank sends len(sizes) messages to every other rank and checks what it gets, in order."""

    def body(r: int, e) -> None:
        sends = []
        for d in range(e.size):
            if d == r:
                continue
            for i, size in enumerate(sizes):
                sync = bool(sync_every) and i % sync_every == 0
                sends.append(e.isend(d, 0, 7, [memoryview(_pattern(r, i, size))], sync=sync))
        for s in range(e.size):
            if s == r:
                continue
            for i, size in enumerate(sizes):
                op = e.irecv(s, 0, 7, None)
                e.wait(op, timeout=30)
                got = np.frombuffer(op.payload, dtype=np.uint8)
                assert got.size == size and (got == (s * 31 + i) % 251).all(), f"message {i} from {s} is wrong"
        e.wait_all(sends, timeout=30)

    return body


def _kinds(w: RelayedWorld) -> set[str]:
    return {link["kind"] for e in w.engines for link in e.link_stats()}


SIZES = [0, 1, 100, 1024, 1025, 5000, 40_000, 3]


@pytest.mark.parametrize("channel, kind", [("auto", "direct"), ("direct", "direct"), ("punch", "punched"), ("relay", "relayed")])
def test_every_channel_delivers_in_order(world, channel, kind):
    w = world(3, channel=channel)
    w.run(_all_to_all(SIZES * 3, sync_every=5))
    assert _kinds(w) == {kind}
    assert all(len(e.link_stats()) == 2 for e in w.engines)  # one link per peer, no duplicates
    w.finalize()
    assert w.job.wait(lambda s: len(s.finished) == 3, 5)  # FINISHED reaches the launcher a moment later
    assert w.job.state.finished == {0: 0, 1: 0, 2: 0}


def test_links_stay_lazy_with_every_channel(world):
    w = world(4, channel="punch")

    def body(r, e):
        if r in (0, 2):
            peer = 2 - r
            e.wait(e.isend(peer, 0, 1, [memoryview(b"x")]), timeout=10)
            e.wait(e.irecv(peer, 0, 1, None), timeout=10)

    w.run(body)
    assert [len(e.link_stats()) for e in w.engines] == [1, 0, 1, 0]


def test_large_relayed_message_lands_in_the_posted_buffer(world):
    w = world(2, channel="relay")
    data = np.random.default_rng(1).random(300_000)  # 2.4 MB in 4 KiB relay chunks

    def body(r, e):
        if r == 0:
            e.wait(e.isend(1, 0, 9, [memoryview(data).cast("B")]), timeout=30)
        else:
            out = np.empty_like(data)
            op = e.irecv(0, 0, 9, memoryview(out).cast("B"))
            e.wait(op, timeout=30)
            assert np.array_equal(out, data) and op.payload is None

    w.run(body)


def _kill_link(e, peer: int) -> None:
    link = e.core.peers[peer].link
    assert link is not None, "no TCP link to kill"
    link.sock.shutdown(socket.SHUT_RDWR)


@pytest.mark.parametrize("killer", [0, 1])
@pytest.mark.parametrize("flow", [{}, {"eager_limit": 2000, "unexpected_max": 50_000}], ids=["eager", "rendezvous"])
def test_a_dying_link_fails_over_to_the_relay_without_loss_duplication_or_reordering(world, killer, flow):
    """(`rendezvous`: most messages are announced, and RTS, CTS, CREDIT and payloads are in flight as the
    link dies)"""
    w = world(2, **flow)  # auto: a direct link over loopback first
    n = 600
    sizes = [[0, 10, 700, 3000, 60_000][i % 5] for i in range(n)]
    both_linked = threading.Barrier(2, timeout=10)

    def body(r, e):
        peer = 1 - r
        sends = []
        got = []
        # open the link, then stream both ways while one side kills the connection
        e.wait(e.isend(peer, 0, 1, [memoryview(b"hi")]), timeout=10)
        e.wait(e.irecv(peer, 0, 1, None), timeout=10)
        assert e.core.peers[peer].kind == "direct"
        both_linked.wait()
        recvs = [e.irecv(peer, 0, 2, None) for _ in range(n)]
        for i, size in enumerate(sizes):
            sends.append(e.isend(peer, 0, 2, [memoryview(_pattern(r, i, size))], sync=(i % 50 == 7)))
            if i == n // 3 and r == killer:
                _kill_link(e, peer)
        e.wait_all(sends, timeout=40)
        e.wait_all(recvs, timeout=40)
        for i, op in enumerate(recvs):
            payload = np.frombuffer(op.payload, dtype=np.uint8)
            assert payload.size == sizes[i] and (payload == (peer * 31 + i) % 251).all(), f"message {i} wrong"
            got.append(i)
        assert got == list(range(n))
        # and the pair keeps working, through the relay
        e.wait(e.isend(peer, 0, 3, [memoryview(b"after")]), timeout=10)
        op = e.irecv(peer, 0, 3, None)
        e.wait(op, timeout=10)
        assert bytes(op.payload) == b"after"

    w.run(body)
    for e in w.engines:
        (link,) = e.link_stats()
        assert link["kind"] == "relayed" and link["failovers"] == 1


def test_failover_in_the_middle_of_a_large_frame_refills_the_same_receive(world):
    w = world(2, link_timeout=30)
    data = np.random.default_rng(2).random(2_000_000)  # 16 MB: the link dies while it streams

    def body(r, e):
        peer = 1 - r
        e.wait(e.isend(peer, 0, 1, [memoryview(b"hi")]), timeout=10)
        e.wait(e.irecv(peer, 0, 1, None), timeout=10)
        if r == 0:
            send = e.isend(1, 0, 5, [memoryview(data).cast("B")])
            time.sleep(0.002)
            _kill_link(e, 1)
            e.wait(send, timeout=60)
        else:
            first, out = np.empty_like(data), np.empty(4)
            op1 = e.irecv(0, 0, 5, memoryview(first).cast("B"))
            op2 = e.irecv(0, 0, 5, memoryview(out).cast("B"))  # posted later: must not get the resent frame
            e.wait(op1, timeout=60)
            assert np.array_equal(first, data)
            assert not op2.done
            assert e.cancel(op2)

    w.run(body)


def test_synchronous_send_completes_across_a_failover(world):
    w = world(2)

    def body(r, e):
        peer = 1 - r
        e.wait(e.isend(peer, 0, 1, [memoryview(b"hi")]), timeout=10)
        e.wait(e.irecv(peer, 0, 1, None), timeout=10)
        if r == 0:
            send = e.isend(1, 0, 2, [memoryview(b"ssend")], sync=True)
            time.sleep(0.2)
            assert not send.done  # not matched yet
            _kill_link(e, 1)
            e.wait(send, timeout=20)
        else:
            time.sleep(0.6)  # receive only after the failover
            op = e.irecv(0, 0, 2, None)
            e.wait(op, timeout=20)
            assert bytes(op.payload) == b"ssend"

    w.run(body)
    assert all(e.link_stats()[0]["failovers"] == 1 for e in w.engines)


def test_without_the_relay_fallback_a_dead_link_fails_the_peer(world):
    w = world(2, channel="direct")

    def body(r, e):
        peer = 1 - r
        e.wait(e.isend(peer, 0, 1, [memoryview(b"hi")]), timeout=10)
        e.wait(e.irecv(peer, 0, 1, None), timeout=10)
        if r == 0:
            pending = e.irecv(1, 0, 2, None)
            _kill_link(e, 1)
            with pytest.raises(TransportError, match="rank 1"):
                e.wait(pending, timeout=10)

    w.run(body)


def test_a_rank_that_died_is_reported_to_whoever_sends_to_it(world):
    w = world(3, channel="relay")
    dead = w.sessions[2]
    dead._closed = True
    dead.engine.abandon()
    dead.engine.relay.sock.close()  # like a crash: the relay sees the connection drop
    start = time.monotonic()

    def body(r, e):
        if r == 0:
            send = e.isend(2, 0, 1, [memoryview(b"anyone?")])
            with pytest.raises(TransportError, match="rank 2 is gone") as info:
                e.wait(send, timeout=10)
            assert info.value.error_class == "ERR_PEER_DIED"

    w.run(lambda r, e: body(r, e) if r != 2 else None)
    assert time.monotonic() - start < 5


def test_a_peer_that_never_answers_through_the_relay_fails_in_bounded_time(world):
    w = world(2, channel="relay", resume_timeout=1.0)
    w.engines[1].core.loop.stop()  # hung: connected to the relay, but nothing reads its frames
    start = time.monotonic()
    send = w.engines[0].isend(1, 0, 1, [memoryview(b"hello?")])
    with pytest.raises(TransportError, match="did not answer through the relay within 1 s"):
        w.engines[0].wait(send, timeout=10)
    assert time.monotonic() - start < 4


def test_link_reports_reach_the_launcher(world):
    w = world(3, channel="punch")
    w.run(_all_to_all([10]))
    w.finalize()
    assert w.job.wait(lambda s: len(s.finished) == 3, 5)
    table = w.job.state.links
    assert sorted(table.links) == [(0, 1), (0, 2), (1, 2)]
    assert table.counts() == {"direct": 0, "punched": 3, "relayed": 0}
    assert "links: 3 (0 direct, 3 punched, 0 relayed)" in table.summary()
