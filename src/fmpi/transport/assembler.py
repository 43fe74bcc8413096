"""Turning a byte stream from one peer into frames, wherever the bytes come from.

A TCP link feeds it what ``recv`` returned; the relay channel feeds it the
chunks of a relayed stream. Frames may be split anywhere: a header across
two reads, a 64 MiB payload across hundreds of relay chunks. The payload of a
DATA frame goes straight into the destination the engine chose when the
header arrived (a posted receive's buffer when one matches, so large
messages are copied once), or nowhere at all when the engine says the frame
is a duplicate.
"""

from __future__ import annotations

from typing import Protocol

from ..wire.rank_frames import (
    HEADER,
    HEADER_SIZE,
    Flag,
    FrameError,
    Header,
    Kind,
    parse_header,
    unpack_header,
)
from .links.shm_lane import LaneReader

_unpack_from = HEADER.unpack_from
_EMPTY = memoryview(b"")


class FrameSink(Protocol):
    """What an assembler reports to: the progress engine."""

    def frame_started(self, source: "FrameAssembler", header: Header) -> memoryview | None:
        """A DATA header with a payload arrived: where do its bytes go (None: discard them)?"""

    def frame_finished(self, source: "FrameAssembler", header: Header, payload: memoryview | None) -> None:
        """A whole frame arrived (its payload already written to the destination)."""

    def frame_whole(
        self, source: "FrameAssembler", flags: int, tag: int, context: int, seq: int, ack: int, payload: memoryview
    ) -> None:
        """A whole DATA frame arrived in one piece (`payload` is only valid during the call).

        The header comes as its fields, not a ``Header``: this is the
        small-message path, and building the object cost a tenth of it.
        """


class FrameAssembler:
    """Incremental frame parser for one peer over one carrier ("tcp" or "relay")."""

    __slots__ = ("peer", "via", "retired", "lane", "_sink", "_head", "_hlen", "_header", "dest", "_off")

    def __init__(self, peer: int, via: str, sink: FrameSink) -> None:
        self.peer = peer
        self.via = via
        self.retired = False  # its carrier was dropped: frames still in a read batch are ignored
        self.lane: LaneReader | None = None  # where LANE frames' payloads are (a link to a rank on this host)
        self._sink = sink
        self._head = bytearray(HEADER_SIZE)
        self._hlen = 0
        self._header: Header | None = None
        # Where the current frame's payload goes (None between frames, or for a discarded one).
        self.dest: memoryview | None = None
        self._off = 0

    def feed(self, view: memoryview, end: int | None = None) -> None:
        """Consume `view[:end]` (all of it by default). Raises FrameError on a malformed header."""
        pos = 0
        if end is None:
            end = len(view)
        while pos < end:
            header = self._header
            if header is None:
                if self._hlen == 0 and end - pos >= HEADER_SIZE:
                    fields = _unpack_from(view, pos)
                    pos += HEADER_SIZE
                    kind, flags, _, _, tag, context, seq, n, ack = fields
                    if kind == Kind.DATA and not flags & Flag.LANE and end - pos >= n:
                        # The small-message path: header and payload in one read,
                        # matched and delivered in one step.
                        self._sink.frame_whole(self, flags, tag, context, seq, ack, view[pos : pos + n])
                        pos += n
                        continue
                    header = parse_header(*fields)
                    if flags & Flag.LANE:
                        self._from_lane(header)
                        continue
                else:
                    take = min(HEADER_SIZE - self._hlen, end - pos)
                    self._head[self._hlen : self._hlen + take] = view[pos : pos + take]
                    self._hlen += take
                    pos += take
                    if self._hlen < HEADER_SIZE:
                        return
                    self._hlen = 0
                    header = unpack_header(self._head)
                    if header.flags & Flag.LANE:
                        self._from_lane(header)
                        continue
                self._begin(header)
                continue
            take = min(header.nbytes - self._off, end - pos)
            if self.dest is not None:
                self.dest[self._off : self._off + take] = view[pos : pos + take]
            self._off += take
            pos += take
            if self._off == header.nbytes:
                self._finish()

    def _from_lane(self, header: Header) -> None:
        """A LANE frame: its payload is the next one in the lane, whole (delivered like a small frame)."""
        lane = self.lane
        if lane is None or header.kind is not Kind.DATA:
            raise FrameError(f"a {header.kind.name} frame flagged LANE on a carrier without a lane")
        payload = lane.take(header.nbytes)  # (a LaneError is an OSError: the link fails over)
        try:
            self._sink.frame_whole(self, header.flags, header.tag, header.context, header.seq, header.ack, payload)
        finally:
            if not lane.kept:  # (a held payload waits in the ring for its receive: ``LaneReader.hold``)
                payload.release()
        # Free the bytes only once the stream has recorded the frame (the writer's
        # stream keeps them as its copy for resending: see stream.py). A retired
        # link's frames were not recorded: its lane is abandoned as it is.
        if not self.retired:
            lane.release()

    def direct_target(self, threshold: int) -> memoryview | None:
        """The rest of the current payload's destination, when at least `threshold` bytes are missing.

        A TCP link reads such payloads straight into the destination with
        ``recv_into`` (no staging copy), then reports them with ``advance``.
        """
        header = self._header
        if header is None or self.dest is None or header.nbytes - self._off < threshold:
            return None
        return self.dest[self._off :]

    def advance(self, n: int) -> None:
        """`n` payload bytes were written into ``direct_target()`` by the caller."""
        assert self._header is not None
        self._off += n
        if self._off == self._header.nbytes:
            self._finish()

    def in_frame(self) -> bool:
        return self._header is not None or self._hlen > 0

    def _begin(self, header: Header) -> None:
        if header.kind is Kind.DATA:
            if not header.nbytes:  # (an empty message is whole as soon as its header is: one path for it)
                self._sink.frame_whole(self, header.flags, header.tag, header.context, header.seq, header.ack, _EMPTY)
                return
            self._header = header
            self._off = 0
            self.dest = self._sink.frame_started(self, header)
        else:
            self._sink.frame_finished(self, header, None)

    def _finish(self) -> None:
        header, dest = self._header, self.dest
        self._header = None
        self.dest = None
        assert header is not None
        self._sink.frame_finished(self, header, dest)
