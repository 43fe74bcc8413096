"""Pure units: the reliable stream (sequence numbers, acknowledgements, resending), the
simultaneous-open handshake, and the per-pair route plan."""

from __future__ import annotations

import socket
import threading

import pytest

from fmpi.transport.assembler import FrameAssembler
from fmpi.transport.links.handshake import (
    CONFIRM,
    HELLO,
    MAGIC,
    VERSION,
    Acceptance,
    HandshakeError,
    Hello,
    Verdict,
    initiate,
)
from fmpi.transport.requests import SendOp, TransportError
from fmpi.transport.routes import PeerAddress, plan_route
from fmpi.transport.stream import Stream
from fmpi.wire.rank_frames import (
    Flag,
    FrameError,
    Kind,
    unpack_header,
)


class Wire:
    """A carrier that keeps frames; can be told to queue (as a busy socket would)."""

    def __init__(self, busy: bool = False) -> None:
        self.frames: list[bytes] = []
        self.busy = busy
        self.wlock = threading.Lock()

    def write(self, parts, token) -> bool:
        self.frames.append(b"".join(bytes(p) for p in parts))
        return not self.busy

    write_held = write

    def headers(self):
        return [unpack_header(f) for f in self.frames]


def _stream(**kw) -> Stream:
    return Stream(0, 1, **{"copy_limit": 8, "ack_every": 3, "ack_bytes": 100, **kw})


def _op(n: int = 0, sync: bool = False) -> SendOp:
    return SendOp(1, n, sync)


def test_small_messages_are_copied_and_complete_on_write_large_ones_on_ack():
    s = _stream()
    wire = Wire()
    s.attach(wire)
    small, large = bytearray(b"abc"), bytearray(b"0123456789")
    op_small, op_large = _op(3), _op(10)
    assert s.push_data(op_small, 1, 0, [memoryview(small)]) == (None, True)
    assert s.push_data(op_large, 1, 0, [memoryview(large)]) == (None, False)
    small[:] = b"xyz"  # the sender may reuse a small buffer at once: the stream kept a copy
    seqs = [h.seq for h in wire.headers()]
    assert seqs == [0, 1] and wire.headers()[1].flags & Flag.ACK_NOW
    done, drained = s.acknowledged(2)
    assert done == [op_small, op_large] and drained
    assert not s.pending()


def test_resume_resends_exactly_what_the_peer_lacks_in_order():
    s = _stream()
    first = Wire()
    s.attach(first)
    ops = [_op(1) for _ in range(5)]
    for i, op in enumerate(ops):
        s.push_data(op, 0, 0, [memoryview(bytes([i]))])
    s.acknowledged(1)  # the peer confirmed frame 0 before the link died
    s.detach()
    held = _op(1)
    assert s.push_data(held, 0, 0, [memoryview(b"\x05")]) == (None, False)  # sent while no carrier: held
    relay = Wire()
    queued, done = s.attach(relay, resume_from=3)  # the peer's RESUME: it holds frames 0..2
    assert [h.seq for h in relay.headers()] == [3, 4, 5]
    assert [f[-1] for f in relay.frames] == [3, 4, 5]
    assert ops[1] in done and ops[2] in done and held in done  # acked ones, and the held one now written


def test_acknowledgements_ride_on_traffic_and_bare_acks_follow_the_thresholds():
    s = _stream(ack_every=3)
    wire = Wire()
    s.attach(wire)
    for seq in range(2):
        assert s.accept(seq, 10, 0)
    assert s.ack_due() == "later"  # 2 frames: wait for something to ride on
    s.push_data(_op(), 0, 0, [])
    assert wire.headers()[-1].ack == 2 and s.ack_due() is None  # it rode on our frame
    for seq in range(2, 5):
        assert s.accept(seq, 10, 0)
    assert s.ack_due() == "now"  # ack_every frames
    s.send_ack()
    assert wire.headers()[-1].kind is Kind.ACK and wire.headers()[-1].ack == 5
    assert s.accept(5, 10, Flag.ACK_NOW)
    assert s.ack_due() == "now"  # the sender waits for this one


def test_duplicates_are_recognised_and_gaps_are_errors():
    s = _stream()
    assert s.check_seq(0)
    assert s.accept(0, 0, 0)
    assert not s.check_seq(0) and not s.accept(0, 0, 0)
    assert s.recv_next == 1  # (the duplicate was not recorded)
    with pytest.raises(FrameError, match="skipped"):
        s.check_seq(5)
    with pytest.raises(FrameError, match="skipped"):
        s.accept(5, 0, 0)


def test_a_failed_stream_fails_every_waiting_and_every_later_send():
    s = _stream()
    s.attach(Wire(busy=True))
    waiting = _op(100)
    s.push_data(waiting, 0, 0, [memoryview(bytes(100))])
    sync = _op(1, sync=True)
    s.push_data(sync, 0, 0, [memoryview(b"s")])
    error = TransportError("gone", "ERR_PEER_DIED")
    assert set(map(id, s.fail(error))) == {id(waiting), id(sync)}
    later = _op(1)
    assert s.push_data(later, 0, 0, [memoryview(b"x")]) == (None, True) and later.error is error
    assert s.push_control(Kind.BYE) is None  # (nothing to write on a failed stream)


class Sink:
    def __init__(self) -> None:
        self.got = []
        self.whole = 0  # frames delivered in one piece

    def frame_started(self, source, header):
        self.buf = bytearray(header.nbytes)
        return memoryview(self.buf)

    def frame_finished(self, source, header, payload):
        self.got.append((header.kind, header.seq, bytes(payload) if payload is not None else None))

    def frame_whole(self, source, flags, tag, context, seq, ack, payload):
        self.whole += 1
        self.got.append((Kind.DATA, seq, bytes(payload)))


def test_assembler_takes_frames_cut_anywhere():
    s = _stream(copy_limit=1 << 20)
    wire = Wire()
    s.attach(wire)
    for i in range(4):
        s.push_data(_op(i * 7), 0, 0, [memoryview(bytes([i]) * (i * 7))])
    s.push_control(Kind.BYE)
    stream = b"".join(wire.frames)
    for cut in (1, 3, 44, 45, 1000):
        sink = Sink()
        asm = FrameAssembler(1, "relay", sink)
        for pos in range(0, len(stream), cut):
            asm.feed(memoryview(stream[pos : pos + cut]))
        assert sink.got == [(Kind.DATA, i, bytes([i]) * (i * 7)) for i in range(4)] + [(Kind.BYE, 4, None)]
        # Fed all at once, every DATA frame takes the one-step path; cut small, only the empty one
        # (whole as soon as its header is) can.
        assert sink.whole == (4 if cut == 1000 else 1)


def _pair():
    a, b = socket.socketpair()
    for s in (a, b):
        s.settimeout(5)
    return a, b


def test_simultaneous_open_runs_exactly_one_handshake():
    """Both ends called connect() and both send HELLO: the lower rank connects, the higher accepts."""
    a, b = _pair()
    secret = b"k" * 32
    results = {}

    def side(sock, me, peer):
        results[me] = initiate(sock, secret, me, peer, "punched", decide=lambda: Verdict.ACCEPT)

    threads = [threading.Thread(target=side, args=(a, 3, 8)), threading.Thread(target=side, args=(b, 8, 3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results[3].role == "connector" and results[8].role == "acceptor"
    assert results[3].verdict is results[8].verdict is Verdict.ACCEPT
    assert results[8].channel == "punched"
    a.close()
    b.close()


def test_in_a_simultaneous_open_the_connector_confirms_before_the_challenge_comes():
    """The HELLOs crossed, so the lower rank holds both nonces and proves itself at once: the higher rank
    here sends nothing after its HELLO until that CONFIRM is in (with the four-message handshake the two
    would wait for each other until the timeout). One round trip less to a punched link."""
    a, b = _pair()
    secret, nonce_h = b"k" * 32, b"h" * 16
    result = {}
    lower = threading.Thread(target=lambda: result.update(o=initiate(a, secret, 2, 5, "punched", decide=None)))
    lower.start()
    b.sendall(HELLO.pack(MAGIC, VERSION, 5, 2, nonce_h, bytes(16)))
    raw = b.recv(HELLO.size, socket.MSG_WAITALL)
    _magic, _version, src, _dst, nonce_l, host_l = HELLO.unpack(raw)
    acceptance = Acceptance(secret, 5, Hello(src, nonce_l, host_l), nonce_a=nonce_h)
    assert acceptance.confirmed(b.recv(CONFIRM.size, socket.MSG_WAITALL)) == "punched"  # before any CHALLENGE
    b.sendall(acceptance.challenge + acceptance.verdict(Verdict.ACCEPT))
    lower.join(10)
    assert result["o"].verdict is Verdict.ACCEPT and result["o"].role == "connector"
    a.close()
    b.close()


def test_a_challenge_with_another_nonce_than_the_hello_is_refused():
    a, b = _pair()
    secret = b"k" * 32
    errors = []

    def lower():
        try:
            initiate(a, secret, 2, 5, "punched")
        except HandshakeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=lower)
    thread.start()
    b.sendall(HELLO.pack(MAGIC, VERSION, 5, 2, b"h" * 16, bytes(16)))
    _magic, _version, src, _dst, nonce_l, host_l = HELLO.unpack(b.recv(HELLO.size, socket.MSG_WAITALL))
    b.recv(CONFIRM.size, socket.MSG_WAITALL)
    other = Acceptance(secret, 5, Hello(src, nonce_l, host_l), nonce_a=b"x" * 16)  # a valid MAC, another nonce
    b.sendall(other.challenge + other.verdict(Verdict.ACCEPT))
    thread.join(10)
    assert errors and "another nonce" in str(errors[0])
    a.close()
    b.close()


def test_simultaneous_open_with_the_wrong_secret_is_refused():
    a, b = _pair()
    errors = []

    def side(sock, me, peer, secret):
        try:
            initiate(sock, secret, me, peer, "punched", decide=lambda: Verdict.ACCEPT)
        except (HandshakeError, OSError) as exc:
            errors.append((me, exc))
            sock.close()

    threads = [
        threading.Thread(target=side, args=(a, 0, 1, b"a" * 32)),
        threading.Thread(target=side, args=(b, 1, 0, b"b" * 32)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert any("authentication" in str(exc) for _, exc in errors)


def _addr(rank, private, observed, probe=None):
    return PeerAddress(rank, (private,), observed, probe)


@pytest.mark.parametrize(
    "me, peer, steps",
    [
        # a local job: nobody translates
        (_addr(0, ("127.0.0.1", 5000), ("127.0.0.1", 5000)), _addr(1, ("127.0.0.1", 5001), ("127.0.0.1", 5001)), ["direct", "punch", "relay"]),
        # two cone NATs
        (_addr(0, ("10.0.0.2", 5000), ("1.1.1.1", 5000), ("1.1.1.1", 5000)), _addr(1, ("10.0.0.3", 6000), ("2.2.2.2", 6000), ("2.2.2.2", 6000)), ["punch", "relay"]),
        # same LAN behind one NAT: plain connect first
        (_addr(0, ("10.0.0.2", 5000), ("1.1.1.1", 5000)), _addr(1, ("10.0.0.3", 6000), ("1.1.1.1", 6000)), ["direct", "punch", "relay"]),
        # symmetric to cone: punching is doomed
        (_addr(0, ("10.0.0.2", 5000), ("1.1.1.1", 5000), ("1.1.1.1", 5999)), _addr(1, ("10.0.0.3", 6000), ("2.2.2.2", 6000), ("2.2.2.2", 6000)), ["relay"]),
        # symmetric to public: plain connect reaches it (and the peer's punch would too)
        (_addr(0, ("10.0.0.2", 5000), ("1.1.1.1", 5000), ("1.1.1.1", 5999)), _addr(1, ("3.3.3.3", 7000), ("3.3.3.3", 7000)), ["direct", "punch", "relay"]),
    ],
)
def test_route_plans(me, peer, steps):
    assert plan_route(me, peer).steps("auto") == steps
    # both ends agree on whether punching can work
    assert plan_route(me, peer).punchable == plan_route(peer, me).punchable


def test_forced_channels():
    route = plan_route(_addr(0, ("10.0.0.2", 1), ("1.1.1.1", 1)), _addr(1, ("10.0.0.3", 2), ("2.2.2.2", 2)))
    assert route.steps("relay") == ["relay"] and route.steps("punch") == ["punch"] and route.steps("direct") == ["direct"]
    assert route.punch == (("10.0.0.3", 2), ("2.2.2.2", 2))  # private first, then public
