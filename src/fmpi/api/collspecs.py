"""Message specifications of the collective (uppercase) calls, parsed as mpi4py does.

Three shapes, after mpi4py's ``msgbuffer.pxi``:

- a *simple* spec (``BufSpec``): ``buf``, ``[buf, count]``, ``[buf, datatype]``,
  ``[buf, count, datatype]``, ``[buf, (count, displ), datatype]``,
  ``[buf, count, displ, datatype]``;
- a *block* spec (``BufSpecB``), the same forms where ``count`` is per rank;
  without a count the buffer is split evenly into ``blocks`` parts;
- a *vector* spec (``BufSpecV``): ``[buf, counts]``, ``[buf, (counts, displs)]``,
  ``[buf, counts, datatype]``, ``[buf, counts, displs, datatype]``; an integer
  count means that count for every rank, an integer displacement a stride,
  no displacements means packed in rank order, no counts an even split
  (the first ranks one longer).

``None`` or ``MPI.IN_PLACE`` as a send buffer means "in place", as in mpi4py.
Counts and displacements are in elements; results are byte views on the
caller's memory (nothing is copied), unless the datatype leaves gaps: then a
spec's bytes are packed into a staging buffer (sending) or received into one
that ``finish`` unpacks (see ``staging``). Alltoallw's *w* spec is parsed
here too: ``[buf, counts, displs, datatypes]`` or ``[buf, (counts, displs),
datatypes]``, displacements in bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..collectives.options import Layout
from . import exceptions as err
from . import staging
from .buffers import byte_view
from .constants import BOTTOM, IN_PLACE
from .datatypes import Datatype, from_dtype, from_typechar


def in_place(spec: Any) -> bool:
    return spec is None or spec is IN_PLACE


@dataclass(slots=True)
class Simple:
    view: memoryview  # from the displacement to the end of the buffer
    count: int  # elements (per block for block specs)
    datatype: Datatype
    flat: np.ndarray | None = None  # the caller's array itself (flattened view), when it was one
    # A datatype with gaps: (the whole buffer, the byte where the message starts, writable); the
    # staging buffer of the last ``data`` call, and what unpacks it (``finish``).
    gappy: tuple[memoryview, int, bool] | None = None
    unpack: staging.Unpack | None = None

    @property
    def itemsize(self) -> int:
        return self.datatype.Get_size()

    @property
    def nbytes(self) -> int:
        return self.count * self.itemsize

    def data(self, blocks: int = 1) -> memoryview:
        """The bytes of `blocks` consecutive blocks of `count` elements (bounds-checked)."""
        if self.gappy is not None:
            return self._staged(blocks)
        n = self.nbytes * blocks
        if n > len(self.view):
            raise ValueError(f"message: {blocks} x {self.count} x {self.datatype.name} overruns a {len(self.view)}-byte buffer")
        return self.view[:n]

    def array(self, blocks: int = 1) -> np.ndarray:
        """The message as a 1-D array of its element type (a view; read-only if the buffer is)."""
        if self.flat is not None and self.flat.size == self.count * blocks:
            return self.flat
        dtype = self.datatype.dtype
        if dtype is None:
            raise err.Exception(err.ERR_TYPE, f"{self.datatype.name or 'this datatype'} has no single element type")
        return np.frombuffer(self.data(blocks), dtype=dtype)

    @property
    def stages_receive(self) -> bool:
        """Received bytes land in a staging buffer that ``finish`` unpacks."""
        return self.gappy is not None and self.gappy[2]

    def _staged(self, blocks: int) -> memoryview:
        whole, base, writable = self.gappy
        record = self.datatype._t
        if not writable:
            return staging.pack(whole, base, self.count * blocks, record)
        target, self.unpack = staging.receive(whole, base, self.count * blocks, record, fill=True)
        return target

    def finish(self) -> None:
        """After the call: the received bytes to their places (datatypes with gaps only)."""
        if self.unpack is not None:
            self.unpack(staging.EVERYTHING)


@dataclass(slots=True)
class Vector:
    view: memoryview  # the whole buffer (a staging buffer for datatypes with gaps)
    layout: Layout  # in bytes
    counts: list[int]
    datatype: Datatype | None  # (None: a w spec, one datatype per block)
    stage: staging.Blocks | None = None

    @property
    def stages_receive(self) -> bool:
        """Received bytes land in a staging buffer that ``finish`` unpacks."""
        return self.stage is not None and self.stage.staged and self.stage.writable

    def finish(self) -> None:
        """After the call: the received bytes to their places (datatypes with gaps only)."""
        if self.stage is not None:
            self.stage.finish()


def _is_datatype(obj: Any) -> bool:
    return isinstance(obj, (Datatype, str))


def _datatype(obj: Any) -> Datatype:
    if isinstance(obj, Datatype):
        return obj
    found = from_typechar(obj)
    if found is None:
        raise KeyError(f"cannot map {obj!r} to MPI datatype")
    return found


def _buffer(buf: Any, writable: bool, dtype_spec: Any) -> tuple[memoryview, Datatype]:
    if buf is None or buf is BOTTOM:  # as in mpi4py: no memory of its own; the datatype must be given
        return memoryview(bytearray()), _datatype(dtype_spec) if dtype_spec is not None else from_typechar("B")
    view, implied = byte_view(buf, writable)
    return view, (_datatype(dtype_spec) if dtype_spec is not None else implied)


def simple(spec: Any, writable: bool, blocks: int = 0) -> Simple:
    """Parse a simple or block spec; `blocks` >= 2 infers a per-block count from the buffer."""
    if type(spec) is np.ndarray and (flags := spec.flags).c_contiguous and (flags.writeable or not writable):
        # The common case, fast: a whole contiguous array of a predefined type.
        flat = spec.reshape(-1)
        datatype = from_dtype(spec.dtype)
        count = flat.size
        if blocks >= 2:
            if count % blocks:
                raise ValueError(
                    f"message: cannot infer count, number of entries {count} is not a multiple of required number of blocks {blocks}"
                )
            count //= blocks
        return Simple(memoryview(flat.view(np.uint8)), count, datatype, flat)
    o_buf, o_count, o_displ, o_type = spec, None, None, None
    if isinstance(spec, (list, tuple)):
        n = len(spec)
        if n == 2:
            o_buf, o_count = spec
            if _is_datatype(o_count):
                o_count, o_type = None, o_count
            elif isinstance(o_count, (list, tuple)):
                o_count, o_displ = o_count
        elif n == 3:
            o_buf, o_count, o_type = spec
            if isinstance(o_count, (list, tuple)):
                o_count, o_displ = o_count
        elif n == 4:
            o_buf, o_count, o_displ, o_type = spec
        else:
            raise ValueError("message: expecting 2 to 4 items")
    view, datatype = _buffer(o_buf, writable, o_type)
    if datatype and not datatype._t.contiguous:
        return _gappy(view, datatype, o_count, o_displ, writable, blocks)
    extent = datatype.Get_size()
    offset = 0
    if o_displ:
        if o_displ < 0:
            raise ValueError(f"message: negative diplacement {o_displ}")
        if extent <= 0 or o_displ * extent > len(view):
            raise ValueError(f"message: displacement {o_displ} out of bounds")
        offset = o_displ * extent
    view = view[offset:]
    if o_count is not None:
        count = int(o_count)
        if count < 0:
            raise ValueError(f"message: negative count {count}")
    elif len(view) == 0:
        count = 0
    else:
        if extent <= 0:
            raise ValueError("message: cannot infer count, datatype has no size")
        if len(view) % extent:
            raise ValueError(f"message: cannot infer count, buffer length {len(view)} is not a multiple of datatype extent {extent}")
        count = len(view) // extent
        if blocks >= 2:
            if count % blocks:
                raise ValueError(
                    f"message: cannot infer count, number of entries {count} is not a multiple of required number of blocks {blocks}"
                )
            count //= blocks
    return Simple(view, count, datatype)


def _gappy(view: memoryview, datatype: Datatype, count: Any, displ: Any, writable: bool, blocks: int) -> Simple:
    record = datatype._t
    staging.check_usable(record)
    extent = record.extent
    base = int(displ or 0) * extent
    if base < 0:
        raise ValueError(f"message: negative diplacement {displ}")
    if count is None:
        count = (len(view) - base) // extent if extent > 0 else 0
        if blocks >= 2:
            if count % blocks:
                raise ValueError(
                    f"message: cannot infer count, number of entries {count} is not a multiple of required number of blocks {blocks}"
                )
            count //= blocks
    if int(count) < 0:
        raise ValueError(f"message: negative count {count}")
    return Simple(view, int(count), datatype, None, (view, base, writable))


def vector(spec: Any, writable: bool, blocks: int) -> Vector:
    """Parse a vector spec for `blocks` ranks."""
    o_buf, o_counts, o_displs, o_type = spec, None, None, None
    if isinstance(spec, (list, tuple)):
        n = len(spec)
        if n == 2:
            o_buf, o_counts = spec
            if _is_datatype(o_counts):
                o_counts, o_type = None, o_counts
            elif isinstance(o_counts, tuple):
                o_counts, o_displs = o_counts
        elif n == 3:
            o_buf, o_counts, o_type = spec
            if isinstance(o_counts, tuple):
                o_counts, o_displs = o_counts
        elif n == 4:
            o_buf, o_counts, o_displs, o_type = spec
        else:
            raise ValueError("message: expecting 2 to 4 items")
    view, datatype = _buffer(o_buf, writable, o_type)
    extent = datatype._t.extent
    if o_counts is None:
        total = 0
        if len(view):
            if extent <= 0 or len(view) % extent:
                raise ValueError(f"message: cannot infer count, buffer length {len(view)} is not a multiple of datatype extent {extent}")
            total = len(view) // extent
        counts = [total // blocks + (total % blocks > i) for i in range(blocks)]
    elif isinstance(o_counts, (int, np.integer)):
        counts = [int(o_counts)] * blocks
    else:
        counts = _array(o_counts, blocks, "counts")
    if o_displs is None:
        displs, pos = [], 0
        for c in counts:
            displs.append(pos)
            pos += c
    elif isinstance(o_displs, (int, np.integer)):
        displs = [int(o_displs) * i for i in range(blocks)]
    else:
        displs = _array(o_displs, blocks, "displs")
    if any(c < 0 for c in counts) or any(d < 0 for d in displs):
        raise ValueError("message: negative count or displacement")
    if datatype and not datatype._t.contiguous:
        stage = staging.Blocks(view, [(d * extent, c, datatype._t) for c, d in zip(counts, displs)], writable)
        return Vector(stage.buffer, stage.layout, counts, datatype, stage)
    layout = Layout([d * extent for d in displs], [c * extent for c in counts])
    end = max((o + n for o, n in zip(layout.offsets, layout.lengths) if n), default=0)
    if end > len(view):
        raise ValueError(f"message: counts and displacements reach byte {end} of a {len(view)}-byte buffer")
    return Vector(view, layout, counts, datatype)


def wvector(spec: Any, writable: bool, blocks: int) -> Vector:
    """Parse a w spec (Alltoallw, Neighbor_alltoallw) for `blocks` ranks: displacements in bytes."""
    if not isinstance(spec, (list, tuple)) or not 2 <= len(spec) <= 4:
        raise ValueError("message: expecting 2 to 4 items")
    if len(spec) == 2:
        o_buf, o_types = spec
        counts, displs = [1] * blocks, [0] * blocks
    else:
        o_buf, o_counts, o_displs, o_types = (spec[0], *spec[1], spec[2]) if len(spec) == 3 else spec
        counts, displs = _array(o_counts, blocks, "counts"), _array(o_displs, blocks, "displs")
    types = [o_types] * blocks if isinstance(o_types, Datatype) else [_datatype(t) for t in o_types]
    if len(types) != blocks:
        raise ValueError(f"message: expecting {blocks} datatypes, got {len(types)}")
    if any(not t for t in types):
        raise err.Exception(err.ERR_TYPE, "invalid datatype: MPI.DATATYPE_NULL")
    if any(c < 0 for c in counts) or any(d < 0 for d in displs):
        raise ValueError("message: negative count or displacement")
    view = None if o_buf is BOTTOM else byte_view(o_buf, writable)[0]
    stage = staging.Blocks(view, [(d, c, t._t) for c, d, t in zip(counts, displs, types)], writable)
    return Vector(stage.buffer, stage.layout, counts, None, stage)


def _array(values: Sequence[int], blocks: int, what: str) -> list[int]:
    out = [int(v) for v in values]
    if len(out) != blocks:
        raise ValueError(f"message: expecting {blocks} {what}, got {len(out)}")
    return out
