"""The progress engine over real loopback sockets: link set-up, authentication, failures.

Several engines run in one test process (one per rank); every byte still
crosses a real TCP connection through the kernel.
"""

from __future__ import annotations

import socket
import struct
import time

import numpy as np
import pytest

from fmpi.transport import waiting
from fmpi.transport.engine import Engine
from fmpi.transport.links.handshake import HELLO, MAGIC, VERSION, Verdict, initiate
from fmpi.transport.options import TransportOptions
from fmpi.transport.requests import TransportError
from fmpi.wire.rank_frames import Kind, pack_header

SECRET = b"s" * 32


def _listener() -> socket.socket:
    return socket.create_server(("127.0.0.1", 0), backlog=64)


@pytest.fixture
def world():
    """world(n, secrets=None) -> list of engines wired to each other's listeners."""
    made: list[Engine] = []

    def make(n: int, secrets: list[bytes] | None = None, **options) -> list[Engine]:
        listeners = [_listener() for _ in range(n)]
        endpoints = [l.getsockname() for l in listeners]
        engines = [
            Engine(r, n, (secrets or [SECRET] * n)[r], lambda peer: [endpoints[peer]], listeners[r], **options)
            for r in range(n)
        ]
        made.extend(engines)
        return engines

    yield make
    for e in made:
        e.abandon()


def _b(data: bytes) -> list[memoryview]:
    return [memoryview(data)]


def test_crossing_first_sends_settle_on_one_link_each_way(world):
    a, b = world(2)
    # Both ranks open the link at the same moment: the tie-break must keep one connection.
    sa, sb = a.isend(1, 0, 1, _b(b"from a")), b.isend(0, 0, 1, _b(b"from b"))
    ra, rb = a.irecv(1, 0, 1, None), b.irecv(0, 0, 1, None)
    for engine, op in ((a, sa), (b, sb), (a, ra), (b, rb)):
        engine.wait(op, timeout=10)
    assert bytes(ra.payload) == b"from b" and bytes(rb.payload) == b"from a"
    assert a.link_summary() == {"linked": 1} and b.link_summary() == {"linked": 1}


def test_links_are_lazy(world):
    engines = world(5)
    engines[0].wait(engines[0].isend(3, 0, 0, _b(b"x")), timeout=10)
    engines[3].wait(engines[3].irecv(0, 0, 0, None), timeout=10)
    assert engines[0].link_summary() == {"linked": 1}
    assert engines[1].link_summary() == {} and engines[2].link_summary() == {}


def test_large_buffer_lands_in_the_posted_buffer(world):
    a, b = world(2)
    data = np.random.default_rng(1).random(3_000_000)
    out = np.empty_like(data)
    recv = b.irecv(0, 0, 9, memoryview(out).cast("B"))
    send = a.isend(1, 0, 9, [memoryview(data).cast("B")])
    b.wait(recv, timeout=30)
    a.wait(send, timeout=30)
    assert np.array_equal(out, data) and recv.nbytes == data.nbytes and recv.payload is None


def test_truncation_is_an_error_not_a_silent_cut(world):
    a, b = world(2)
    a.isend(1, 0, 1, _b(b"0123456789"))
    small = bytearray(4)
    recv = b.irecv(0, 0, 1, memoryview(small))
    with pytest.raises(TransportError, match="truncated") as info:
        b.wait(recv, timeout=10)
    assert info.value.error_class == "ERR_TRUNCATE"


def test_synchronous_send_waits_for_the_match(world):
    a, b = world(2)
    send = a.isend(1, 0, 4, _b(b"sync"), sync=True)
    time.sleep(0.3)
    assert not send.done  # delivered, but nobody has matched it yet
    b.wait(b.irecv(0, 0, 4, None), timeout=10)
    a.wait(send, timeout=10)


def test_cancel_unmatched_receive(world):
    a, b = world(2)
    recv = b.irecv(0, 0, 77, None)
    assert b.cancel(recv) and recv.cancelled and recv.done
    a.wait(a.isend(1, 0, 77, _b(b"late")), timeout=10)
    assert b.probe(0, 0, 77, timeout=10) == (0, 77, 4)  # the message is still there for others


def test_wrong_secret_peer_is_refused(world):
    a, b = world(2, secrets=[SECRET, b"t" * 32])
    send = a.isend(1, 0, 0, _b(b"hi"))
    with pytest.raises(TransportError, match="authentication"):
        a.wait(send, timeout=10)


def test_stranger_cannot_inject_and_engine_keeps_working(world):
    a, b = world(2)
    host, port = b._listener.getsockname()
    # 1) garbage instead of a HELLO
    with socket.create_connection((host, port)) as s:
        s.sendall(b"GET / HTTP/1.1\r\n\r\n" + bytes(64))
        s.settimeout(5)
        try:
            answer = s.recv(100)
        except ConnectionResetError:  # closed with our surplus bytes unread
            answer = b""
        assert answer == b""
    # 2) a well-formed HELLO claiming rank 0, without knowing the secret
    with socket.create_connection((host, port)) as s:
        s.settimeout(5)
        verdict = None
        with pytest.raises(Exception, match="authentication"):
            verdict = initiate(s, b"wrong" * 8, 0, 1).verdict
        assert verdict is None
    # the real rank 0 still gets through
    a.isend(1, 0, 3, _b(b"real"))
    recv = b.irecv(0, 0, 3, None)
    b.wait(recv, timeout=10)
    assert bytes(recv.payload) == b"real"


def test_peer_death_fails_pending_receive_quickly(world):
    a, b = world(2)
    a.wait(a.isend(1, 0, 0, _b(b"hello")), timeout=10)
    b.wait(b.irecv(0, 0, 0, None), timeout=10)
    pending = b.irecv(0, 0, 1, None)
    a.abandon()  # like a crash: sockets close without BYE
    start = time.monotonic()
    with pytest.raises(TransportError, match="closed its connection unexpectedly"):
        b.wait(pending, timeout=10)
    assert time.monotonic() - start < 5
    with pytest.raises(TransportError):
        b.isend(0, 0, 0, _b(b"into the void"))


def test_finalized_peer_is_reported_as_such(world):
    a, b = world(2)
    a.wait(a.isend(1, 0, 0, _b(b"last words")), timeout=10)
    a.close(timeout=5)
    got = b.irecv(0, 0, 0, None)
    b.wait(got, timeout=10)  # data sent before finalize is never lost
    assert bytes(got.payload) == b"last words"
    with pytest.raises(TransportError, match="finalized") as info:
        b.wait(b.irecv(0, 0, 1, None), timeout=10)
    assert info.value.error_class == "ERR_PEER_FINALIZED"


def test_malformed_frame_from_a_member_closes_only_that_link(world):
    a, b, c = world(3)
    host, port = b._listener.getsockname()
    pending = b.irecv(0, 0, 5, None)
    # Rank 0 authenticates properly, then sends a frame with an impossible kind.
    s = socket.create_connection((host, port))
    s.settimeout(5)
    assert initiate(s, SECRET, 0, 1).verdict is Verdict.ACCEPT
    s.sendall(bytes([200]) + pack_header(Kind.DATA, 0, 0, 5, 0, 0, 0)[1:])
    with pytest.raises(TransportError, match="unknown frame kind"):
        b.wait(pending, timeout=10)
    s.close()
    # other peers are unaffected
    c.isend(1, 0, 6, _b(b"fine"))
    ok = b.irecv(2, 0, 6, None)
    b.wait(ok, timeout=10)
    assert bytes(ok.payload) == b"fine"


def test_hello_for_another_rank_is_refused(world):
    a, b = world(2)
    host, port = b._listener.getsockname()
    with socket.create_connection((host, port)) as s:
        s.settimeout(5)
        s.sendall(HELLO.pack(MAGIC, VERSION, 0, 7, bytes(16), bytes(16)))
        verdict = struct.unpack("<B", s.recv(1))[0]
        assert verdict == Verdict.WRONG_RANK


def test_waiting_threads_hand_the_links_over_without_losing_a_wake_up(world):
    """Two threads of one rank wait at once: one on messages over a held link, one on ops completed
    by a third thread. Every wait must end (a lost wake-up would hang one of them until its timeout)."""
    import threading

    a, b = world(2)
    a.wait(a.isend(1, 0, 1, _b(b"hi")), timeout=10)
    b.wait(b.irecv(0, 0, 1, None), timeout=10)  # linked
    rounds = 300
    errors: list[BaseException] = []

    def echo() -> None:  # rank 1 answers every message
        try:
            for _ in range(rounds):
                op = b.irecv(0, 0, 2, None)
                b.wait(op, timeout=10)
                b.wait(b.isend(0, 0, 3, _b(bytes(op.payload))), timeout=10)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def pinger() -> None:  # reads the link itself while it waits
        try:
            for i in range(rounds):
                a.wait(a.isend(1, 0, 2, _b(i.to_bytes(4, "little"))), timeout=10)
                op = a.irecv(1, 0, 3, None)
                a.wait(op, timeout=10)
                assert int.from_bytes(op.payload, "little") == i
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def other_waiter() -> None:
        # Also a reader (it waits on a receive from rank 1 that never comes), but what ends its
        # wait is an op another thread completes: only the bell can wake it.
        try:
            for _ in range(rounds):
                never = a.irecv(1, 0, 99, None)
                op = a.new_op()
                threading.Timer(0.0005, a.finish_op, args=(op,)).start()
                assert a.wait_any([never, op], timeout=10) == 1
                assert a.cancel(never)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=f) for f in (echo, pinger, other_waiter)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)



def _hold_link(b: Engine, recv) -> None:
    """b waits a moment for `recv` (from rank 0), in vain: that wait holds the link to rank 0, and holds
    are sticky (waiting.py), so b's next wait on rank 0 takes the held-link fast path (held_link.py)."""
    with pytest.raises(TransportError, match="timed out"):
        b.wait(recv, timeout=0.05)


def test_a_wait_on_a_held_link_times_out_and_loses_nothing(world):
    a, b = world(2)
    a.isend(1, 0, 0, _b(b"link"))
    b.wait(b.irecv(0, 0, 0, None), timeout=10)
    late = b.irecv(0, 0, 1, None)
    _hold_link(b, late)
    start = time.monotonic()
    with pytest.raises(TransportError, match="timed out") as info:
        b.wait(late, timeout=0.3)
    assert info.value.error_class == "ERR_TIMEOUT" and 0.25 <= time.monotonic() - start < 5
    a.isend(1, 0, 1, _b(b"late"))
    b.wait(late, timeout=10)  # the receive is still posted: the message lands in it
    assert bytes(late.payload) == b"late"


def test_a_wait_on_a_held_link_keeps_the_matching_order(world):
    """An earlier ANY_SOURCE receive matches first, even while a later receive waits on the held link."""
    from fmpi.transport.matching import ANY_SOURCE

    a, b = world(2)
    a.isend(1, 0, 0, _b(b"link"))
    b.wait(b.irecv(0, 0, 0, None), timeout=10)
    first = b.irecv(ANY_SOURCE, 0, 5, None)
    second = b.irecv(0, 0, 5, None)
    _hold_link(b, second)
    a.isend(1, 0, 5, _b(b"one"))
    a.isend(1, 0, 5, _b(b"two"))
    b.wait(second, timeout=10)
    b.wait(first, timeout=10)
    assert (bytes(first.payload), bytes(second.payload)) == (b"one", b"two")


def test_wait_all_down_to_one_receive_on_a_held_link_raises_its_error(world):
    """A sendrecv whose send went out at once waits for the receive alone (the held-link fast path),
    and still raises what went wrong with it."""
    a, b = world(2)
    a.isend(1, 0, 0, _b(b"link"))
    b.wait(b.irecv(0, 0, 0, None), timeout=10)
    small = b.irecv(0, 0, 2, memoryview(bytearray(2)))
    _hold_link(b, small)
    sent = b.isend(0, 0, 2, _b(b"mine"))
    a.isend(1, 0, 2, _b(b"too long"))
    with pytest.raises(TransportError, match="truncated"):
        b.wait_all([sent, small], timeout=10)
    assert sent.done and small.done
    got = a.irecv(1, 0, 2, None)
    a.wait(got, timeout=10)
    assert bytes(got.payload) == b"mine"


# ---------------------------------------------------------------- the held-link exchange
def _held_pair(world, **options):
    """Two engines whose link b holds (``_hold_link``): b's next sendrecv with rank 0 takes the
    exchange fast path (held_link.py), as the step of a collective does."""
    a, b = world(2, **options)
    a.isend(1, 0, 0, _b(b"link"))
    b.wait(b.irecv(0, 0, 0, None), timeout=10)
    probe = b.irecv(0, 0, 99, None)
    _hold_link(b, probe)
    assert b.cancel(probe)
    assert b.core.peers[0].link in b.waiter.held  # (the precondition of the fast path)
    return a, b


def _in_thread(fn):
    import threading

    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)  # (a hung one must not keep pytest from failing)
    t.start()
    return t, out


def test_exchanges_on_a_held_link_deliver_every_message_once_in_order(world):
    """Many rounds of sendrecv both ways, as recursive doubling does: each side gets the other's
    message of the same round, whether it arrived before the exchange began or during it."""
    a, b = _held_pair(world)
    rounds = 300

    def side(e: Engine, peer: int) -> list[bytes]:
        got = []
        for i in range(rounds):
            buf = bytearray(8)
            recv = e.sendrecv(peer, peer, 7, i, _b(struct.pack("<ii", e.rank, i)), memoryview(buf))
            assert (recv.status_source, recv.status_tag, recv.nbytes) == (peer, i, 8)
            got.append(bytes(buf))
        return got

    sides = [_in_thread(lambda: side(a, 1)), _in_thread(lambda: side(b, 0))]
    for t, out in sides:
        t.join(30)
        assert not t.is_alive(), "an exchange hung"
        assert "error" not in out, out.get("error")
    assert sides[1][1]["value"] == [struct.pack("<ii", 0, i) for i in range(rounds)]
    assert sides[0][1]["value"] == [struct.pack("<ii", 1, i) for i in range(rounds)]


def test_an_exchange_whose_reply_came_first_takes_it_and_still_sends(world):
    """The peer's messages were read before the exchange began (they wait as unexpected): the exchange
    matches its reply at once, without waiting, and still sends its own message."""
    a, b = world(2)
    a.isend(1, 0, 0, _b(b"link"))
    b.wait(b.irecv(0, 0, 0, None), timeout=10)
    a.isend(1, 0, 1, _b(b"one"))
    a.isend(1, 0, 2, _b(b"two"))
    time.sleep(0.05)
    probe = b.irecv(0, 0, 99, None)
    _hold_link(b, probe)  # (this wait reads both messages, and holds the link)
    assert b.cancel(probe)
    assert b.core.matcher.pending_counts() == (0, 2) and b.core.peers[0].link in b.waiter.held
    first, second = bytearray(3), bytearray(3)
    for tag, mine, buf in ((1, b"uno", first), (2, b"dos", second)):
        recv = b.sendrecv(0, 0, 0, tag, _b(mine), memoryview(buf))
        assert recv.done and recv.status_tag == tag
    assert (bytes(first), bytes(second)) == (b"one", b"two")
    for tag, text in ((1, b"uno"), (2, b"dos")):
        got = a.irecv(1, 0, tag, None)
        a.wait(got, timeout=10)
        assert bytes(got.payload) == text


def test_an_exchange_keeps_the_matching_order(world):
    """A receive posted earlier that matches the peer's message gets it; the exchange gets the next one."""
    from fmpi.transport.matching import ANY_SOURCE

    a, b = _held_pair(world)
    earlier = b.irecv(ANY_SOURCE, 0, 5, None)
    t, out = _in_thread(lambda: (a.wait(a.isend(1, 0, 5, _b(b"first")), timeout=10), time.sleep(0.05),
                                 a.wait(a.isend(1, 0, 5, _b(b"again")), timeout=10)))
    buf = bytearray(5)
    b.sendrecv(0, 0, 0, 5, _b(b"reply"), memoryview(buf))
    t.join(10)
    b.wait(earlier, timeout=10)
    assert (bytes(earlier.payload), bytes(buf)) == (b"first", b"again")


def test_an_exchange_raises_a_truncated_reply_and_still_delivers_its_message(world):
    a, b = _held_pair(world)
    a.isend(1, 0, 3, _b(b"too long"))
    with pytest.raises(TransportError, match="truncated"):
        b.sendrecv(0, 0, 0, 3, _b(b"mine"), memoryview(bytearray(2)))
    got = a.irecv(1, 0, 3, None)
    a.wait(got, timeout=10)
    assert bytes(got.payload) == b"mine"


def test_exchanges_of_messages_that_complete_on_their_acknowledgement(world):
    """Above the copy limit a send completes when the peer acknowledges it: an exchange waits for that
    too, and both sides' acknowledgements get out while each waits (no deadlock)."""
    a, b = _held_pair(world, options=TransportOptions(copy_limit=8))
    payload = bytes(range(100))

    def side(e: Engine, peer: int) -> bytes:
        for i in range(20):
            buf = bytearray(100)
            e.sendrecv(peer, peer, 0, 10 + i, _b(payload), memoryview(buf))
        return bytes(buf)

    sides = [_in_thread(lambda: side(a, 1)), _in_thread(lambda: side(b, 0))]
    for t, out in sides:
        t.join(30)
        assert not t.is_alive(), "an exchange hung"
        assert out.get("value") == payload, out.get("error")


def test_an_exchange_with_a_peer_that_dies_fails_instead_of_hanging(world):
    a, b = _held_pair(world)
    t, out = _in_thread(lambda: b.sendrecv(0, 0, 0, 4, _b(b"anyone?"), memoryview(bytearray(8))))
    time.sleep(0.2)  # (b waits in the exchange)
    a.abandon()  # a crash: the socket closes without BYE
    t.join(10)
    assert not t.is_alive(), "the exchange hung after its peer died"
    assert isinstance(out.get("error"), TransportError) and "closed its connection unexpectedly" in str(out["error"])


@pytest.mark.parametrize("op_timeout", [None, 30.0], ids=["held-link path", "general wait"])
def test_waiting_for_an_acknowledgement_reads_no_further_than_it(world, monkeypatch, op_timeout):
    """A large send completes on the peer's ACK. Waiting for it, the sender reads that ACK and stops:
    the peer's next large message, right behind it on the link, stays in the kernel until a receive
    is posted for it, and then lands straight in that receive's buffer instead of in a fresh buffer
    of the unexpected queue (page faults, and a second copy). (Over TCP: a send through a
    shared-memory lane completes as it is written.) The progress thread, which reads a link nobody
    waits on, always reads what comes: the links stay held throughout here."""
    monkeypatch.setattr(waiting, "HOLD_IDLE", 60.0)
    # (with FMPI_TIMEOUT set every wait takes the general path, which keeps hang-diagnosis records)
    a, b = _held_pair(world, options=TransportOptions(lane_capacity=0, op_timeout=op_timeout))
    big, nxt = bytes(range(256)) * 2048, bytes(reversed(range(256))) * 2048  # 512 KiB: above the copy limit
    for round_ in range(3):
        send = b.isend(0, 0, 20 + round_, _b(big))  # (written at once, complete only on a's ACK)
        buf = bytearray(len(big))
        a.wait(a.irecv(1, 0, 20 + round_, memoryview(buf)), timeout=10)  # a acknowledges it on arrival ...
        a.isend(1, 0, 30 + round_, _b(nxt))  # ... and its next message follows the ACK
        time.sleep(0.1)  # (both are in b's socket by now)
        b.wait(send, timeout=None if op_timeout else 10)  # (an explicit timeout would take the held-link path)
        assert bytes(buf) == big
        assert b.core.matcher.pending_counts() == (0, 0), "b read past the ACK into the next message"
        got = bytearray(len(nxt))
        b.wait(b.irecv(0, 0, 30 + round_, memoryview(got)), timeout=10)
        assert bytes(got) == nxt


def test_an_exchange_of_large_messages_leaves_the_next_one_unread(world, monkeypatch):
    """The collective pattern: exchange large halves, then the peer at once sends the next large
    message. The exchange's wait for its own send's ACK must not pull that message in."""
    monkeypatch.setattr(waiting, "HOLD_IDLE", 60.0)  # (as above: only the waiting thread reads)
    a, b = _held_pair(world, options=TransportOptions(lane_capacity=0))
    half = bytes(range(256)) * 2048

    def peer_side() -> None:
        for i in range(20):
            a.sendrecv(1, 1, 0, 40 + i, _b(half), memoryview(bytearray(len(half))))
            a.isend(1, 0, 60 + i, _b(half))

    t, out = _in_thread(peer_side)
    unexpected = 0
    for i in range(20):
        buf = bytearray(len(half))
        b.sendrecv(0, 0, 0, 40 + i, _b(half), memoryview(buf))
        assert bytes(buf) == half
        unexpected += b.core.matcher.pending_counts()[1]
        nxt = bytearray(len(half))
        b.wait(b.irecv(0, 0, 60 + i, memoryview(nxt)), timeout=10)
        assert bytes(nxt) == half
    t.join(30)
    assert not t.is_alive() and "error" not in out, out.get("error")
    assert unexpected == 0


def test_a_wait_stops_reading_after_its_large_message(world, monkeypatch):
    """A sender running ahead (a bcast's root) puts the next large message right behind the one a
    receiver waits for. The wait reads its own message and stops: the next one stays in the kernel
    until its receive is posted, then lands straight in that receive's buffer instead of being read
    early into a fresh buffer of the unexpected queue and copied again."""
    monkeypatch.setattr(waiting, "HOLD_IDLE", 60.0)  # (only the waiting thread reads b's link)
    a, b = _held_pair(world, options=TransportOptions(lane_capacity=0))
    messages = [bytes([i]) * 100_000 for i in range(6)]  # (copied and complete as written: a runs ahead)
    for i, m in enumerate(messages):
        a.isend(1, 0, 50 + i, _b(m))
    time.sleep(0.1)  # (what the socket holds is in it by now)
    for i, m in enumerate(messages):
        out = bytearray(len(m))
        b.wait(b.irecv(0, 0, 50 + i, memoryview(out)), timeout=10)
        assert bytes(out) == m
        assert b.core.matcher.pending_counts() == (0, 0), f"the wait for message {i} read the next one too"
