"""Messages of non-contiguous datatypes: their elements packed into one buffer to send, or
received into one and unpacked into place afterwards.

The transport and the collective algorithms only move contiguous bytes. A
message whose datatype leaves gaps (a vector, a subarray, a struct with
padding, a resized type) is gathered into a staging buffer before it is sent
and scattered out of one after it is received, with one numpy strided copy
per piece of the type's layout (``typemap``). A contiguous datatype never gets
here: its message is a view on the user's memory.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..collectives.options import Layout
from . import exceptions as err
from . import typemap

if TYPE_CHECKING:
    from .datatypes import TypeRecord

# Called with the number of bytes that arrived; puts them where the datatype says.
Unpack = Callable[[int], None]
EVERYTHING = 1 << 62
_FIRST_ADDRESS = 1 << 16  # below it no buffer lives: a displacement there is not an address (and would crash)  # (what a collective's receive gets: all it asked for)


def check_usable(record: TypeRecord) -> None:
    if not record.committed:
        raise err.Exception(err.ERR_TYPE, "datatype has not been committed (call its Commit() first)")


def _span(base: int, count: int, record: TypeRecord) -> tuple[int, int]:
    """The bytes `count` elements at `base` touch: [low, high)."""
    if count == 0 or record.size == 0:
        return base, base
    last = (count - 1) * record.extent
    return base + record.true_lb + min(0, last), base + record.true_ub + max(0, last)


def at_addresses(base: int, count: int, record: TypeRecord) -> tuple[memoryview, int]:
    """MPI.BOTTOM as the buffer: the memory the elements' absolute addresses (``Get_address``) name,
    as (a view of it, where `base` falls in the view). As in MPI, the addresses must be valid."""
    low, high = _span(base, count, record)
    if high == low:
        return memoryview(bytearray()), 0
    if low < _FIRST_ADDRESS:
        raise err.Exception(err.ERR_BUFFER, f"MPI.BOTTOM with a datatype reaching address {low:#x}: its displacements"
                            " must be addresses (MPI.Get_address)")
    return memoryview((ctypes.c_char * (high - low)).from_address(low)).cast("B"), base - low


def check_fits(nbytes: int, base: int, count: int, record: TypeRecord) -> None:
    low, high = _span(base, count, record)
    if low < 0 or high > nbytes:
        raise err.Exception(
            err.ERR_BUFFER, f"{count} x a datatype spanning bytes [{record.true_lb}, {record.true_ub}) at byte {base}"
            f" (extent {record.extent}) reach outside a {nbytes}-byte buffer")


def pack(view: memoryview, base: int, count: int, record: TypeRecord, out: memoryview | None = None) -> memoryview:
    """The bytes of `count` elements at byte `base` of `view`, packed (into `out` when given)."""
    check_fits(len(view), base, count, record)
    if out is None:
        out = memoryview(bytearray(count * record.size))
    typemap.pack(record.layout(count), view, base, out)
    return out


def unpack(packed: memoryview, view: memoryview, base: int, count: int, record: TypeRecord) -> None:
    """Scatter the first `count` packed elements to their places at byte `base` of `view`."""
    typemap.unpack(record.layout(count), packed, view, base)


def receive(view: memoryview, base: int, count: int, record: TypeRecord, fill: bool = False) -> tuple[memoryview, Unpack]:
    """A staging buffer for receiving `count` elements, and the function that unpacks what arrived into `view`.

    `fill`: the staging buffer starts with the elements' current bytes (an in-place collective reads them).
    """
    check_fits(len(view), base, count, record)
    staging = pack(view, base, count, record) if fill else memoryview(bytearray(count * record.size))

    def finish(nbytes: int) -> None:
        whole = min(count, nbytes // record.size) if record.size else 0
        unpack(staging, view, base, whole, record)

    return staging, finish


class Blocks:
    """One block per rank of a v- or w-collective: (byte offset in the user's buffer, count, datatype) each.

    ``layout`` says where each rank's bytes are in ``buffer``: the user's own memory when
    every block's datatype is contiguous, else a staging buffer with the blocks packed
    one after another (filled now for sending, unpacked by ``finish`` after receiving).
    """

    def __init__(self, view: memoryview | None, blocks: Sequence[tuple[int, int, TypeRecord]], writable: bool) -> None:
        """(`view` None: MPI.BOTTOM, the offsets are absolute addresses.)"""
        self.writable = writable
        if view is None:
            placed = [(at_addresses(offset, count, record), count, record) for offset, count, record in blocks]
            self._views = [where[0] for where, _, _ in placed]
            blocks = [(where[1], count, record) for where, count, record in placed]
        else:
            self._views = [view] * len(blocks)
        self._blocks = blocks
        self.staged = view is None or not all(record.contiguous for _, _, record in blocks)
        if not self.staged:
            self.buffer = view
            self.layout = Layout([offset for offset, _, _ in blocks], [n * r.size for _, n, r in blocks])
            end = max((o + n for o, n in zip(self.layout.offsets, self.layout.lengths) if n), default=0)
            if end > len(view) or min(self.layout.offsets, default=0) < 0:
                raise ValueError(f"message: counts and displacements reach byte {end} of a {len(view)}-byte buffer")
            return
        for (offset, count, record), where in zip(blocks, self._views):
            check_usable(record)
            check_fits(len(where), offset, count, record)
        self.layout = Layout.packed([n * r.size for _, n, r in blocks])
        self.buffer = memoryview(bytearray(sum(self.layout.lengths)))
        for i, (offset, count, record) in enumerate(blocks):  # (a receive's too: an in-place call reads them)
            pack(self._views[i], offset, count, record, self.layout.view(self.buffer, i))

    def finish(self) -> None:
        """After a receive into ``buffer``: every block to its place in the user's memory."""
        if self.staged and self.writable:
            for i, (offset, count, record) in enumerate(self._blocks):
                unpack(self.layout.view(self.buffer, i), self._views[i], offset, count, record)
