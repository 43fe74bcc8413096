"""Frame header codec and the matching queues (pure units: no I/O involved)."""

import pytest

from fmpi.transport.matching import ANY_SOURCE, ANY_TAG, Matcher
from fmpi.transport.requests import Arrived, RecvOp
from fmpi.wire.rank_frames import (
    HEADER_SIZE,
    MAX_PAYLOAD,
    FrameError,
    Kind,
    pack_header,
    unpack_header,
)


def test_header_roundtrip_keeps_every_field():
    raw = pack_header(Kind.DATA, 1, 7, 2**31 - 1, 2**63 + 5, 123456789, 4096)
    assert len(raw) == HEADER_SIZE
    h = unpack_header(raw)
    assert (h.kind, h.flags, h.source, h.tag, h.context, h.seq, h.nbytes) == (Kind.DATA, 1, 7, 2**31 - 1, 2**63 + 5, 123456789, 4096)


@pytest.mark.parametrize(
    "raw, message",
    [
        (pack_header(Kind.DATA, 0, 0, 0, 0, 0, 0)[:0] + bytes([99]) + bytes(HEADER_SIZE - 1), "unknown frame kind"),
        (pack_header(Kind.DATA, 0, 0, 0, 0, 0, MAX_PAYLOAD + 1), "exceeds the limit"),
        (pack_header(Kind.ACK, 0, 0, 0, 0, 0, 10), "must not carry a payload"),
    ],
)
def test_bad_headers_are_rejected(raw, message):
    with pytest.raises(FrameError, match=message):
        unpack_header(raw)


def _arrived(src, tag, ctx=0, text=b""):
    return Arrived(ctx, src, tag, bytearray(text), None)


def test_unexpected_queue_is_searched_in_arrival_order_with_wildcards():
    m = Matcher()
    for i, (src, tag) in enumerate([(1, 5), (2, 5), (1, 6), (1, 5)]):
        m.add_unexpected(_arrived(src, tag, text=bytes([i])))
    assert m.take_or_post(RecvOp(0, 1, 5, None)).payload == bytearray([0])
    assert m.take_or_post(RecvOp(0, ANY_SOURCE, 5, None)).payload == bytearray([1])
    assert m.take_or_post(RecvOp(0, 1, ANY_TAG, None)).payload == bytearray([2])
    # probe leaves the message in place
    assert m.find_unexpected(RecvOp(0, ANY_SOURCE, ANY_TAG, None)).payload == bytearray([3])
    assert m.take_or_post(RecvOp(0, ANY_SOURCE, ANY_TAG, None)).payload == bytearray([3])
    assert m.find_unexpected(RecvOp(0, ANY_SOURCE, ANY_TAG, None)) is None
    late = RecvOp(0, ANY_SOURCE, ANY_TAG, None)
    assert m.take_or_post(late) is None  # nothing left: it waits for the next arrival
    assert m.pending_counts() == (1, 0) and m.take_posted(0, 7, 9) is late


def test_posted_receives_match_first_posted_first_and_contexts_are_isolated():
    m = Matcher()
    a, b, c = RecvOp(0, ANY_SOURCE, 1, None), RecvOp(0, 3, 1, None), RecvOp(8, 3, 1, None)
    for r in (a, b, c):
        assert m.take_or_post(r) is None
    assert m.take_posted(0, 3, 1) is a  # the earlier wildcard wins
    assert m.take_posted(0, 3, 1) is b
    assert m.take_posted(0, 3, 1) is None  # c lives in another context
    assert m.take_posted(8, 3, 1) is c


def test_unpost_and_failure_sweep():
    m = Matcher()
    keep, gone, wild = RecvOp(0, 1, 1, None), RecvOp(0, 2, 1, None), RecvOp(0, ANY_SOURCE, 1, None)
    for r in (keep, gone, wild):
        assert m.take_or_post(r) is None
    assert m.unpost(keep) and not m.unpost(keep)
    assert m.take_posted_where(lambda r: r.source == 2) == [gone]
    assert m.pending_counts() == (1, 0)
