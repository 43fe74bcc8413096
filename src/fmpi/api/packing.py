"""``Datatype.Pack``/``Unpack``/``Pack_size`` and their ``external32`` forms (mixed into ``Datatype``),
and ``MPI.Get_address``/``Aint_add``/``Aint_diff``.

fmpi's packed form is the datatype's data bytes in typemap order, with no
header (MPICH adds none either), so ``Pack_size(n)`` is ``n * size``.
``external32`` is the same bytes big-endian, element by element (the
representation of long double is the machine's, not IEEE quadruple).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from . import exceptions as err
from . import staging

if TYPE_CHECKING:
    from .datatypes import TypeRecord

EXTERNAL32 = "external32"


def _bytes(buf: Any, writable: bool) -> memoryview:
    from .buffers import byte_view

    return byte_view(buf, writable)[0]


def _extents(record: TypeRecord, elements: int, position: int, packed: int, what: str) -> tuple[int, int, int]:
    """(elements in a buffer of `elements` bytes, where they start and end in the packed buffer of `packed` bytes)."""
    count = elements // record.extent if record.extent > 0 else 0
    start = int(position)
    if not 0 <= start <= packed:
        raise err.Exception(err.ERR_ARG, f"position {start} outside a {packed}-byte buffer")
    end = start + count * record.size
    if end > packed:
        raise err.Exception(err.ERR_TRUNCATE, f"{what} {count * record.size} bytes at {start} overruns {packed}")
    return count, start, end


def _swap(record: TypeRecord, packed: memoryview) -> None:
    """Reverse each element's bytes in place (native <-> external32 on a little-endian machine)."""
    if sys.byteorder == "big" or not len(packed):
        return
    if record.dtype is None:
        raise NotImplementedError("external32 packing of a struct of several element types is not supported by fmpi")
    values = np.frombuffer(packed, dtype=record.dtype)
    values.byteswap(inplace=True)


class TypePacking:
    """Pack and unpack (``Datatype`` inherits them)."""

    __slots__ = ()
    _t: TypeRecord

    def _usable(self) -> TypeRecord:
        if not self:
            raise err.Exception(err.ERR_TYPE, "invalid datatype: MPI.DATATYPE_NULL")
        record = self._t
        staging.check_usable(record)
        return record

    def Pack_size(self, count: int, comm: Any = None) -> int:
        return int(count) * self._usable().size

    def Pack(self, inbuf: Any, outbuf: Any, position: int, comm: Any = None) -> int:
        """Pack as many elements as `inbuf` holds into `outbuf` from `position`; returns the position after them."""
        record = self._usable()
        source, dest = _bytes(inbuf, False), _bytes(outbuf, True)
        count, start, end = _extents(record, len(source), position, len(dest), "packing")
        staging.pack(source, 0, count, record, dest[start:end])
        return end

    def Unpack(self, inbuf: Any, position: int, outbuf: Any, comm: Any = None) -> int:
        """Fill `outbuf` with as many elements as it holds from `inbuf` at `position`; returns the position after them."""
        record = self._usable()
        source, dest = _bytes(inbuf, False), _bytes(outbuf, True)
        count, start, end = _extents(record, len(dest), position, len(source), "unpacking")
        staging.check_fits(len(dest), 0, count, record)
        staging.unpack(source[start:end], dest, 0, count, record)
        return end

    def Pack_external_size(self, datarep: str, count: int) -> int:
        _datarep(datarep)
        return self.Pack_size(count)

    def Pack_external(self, datarep: str, inbuf: Any, outbuf: Any, position: int) -> int:
        _datarep(datarep)
        start = int(position)
        end = self.Pack(inbuf, outbuf, position)
        _swap(self._t, _bytes(outbuf, True)[start:end])
        return end

    def Unpack_external(self, datarep: str, inbuf: Any, position: int, outbuf: Any) -> int:
        _datarep(datarep)
        start = int(position)
        source = _bytes(inbuf, False)
        count = len(_bytes(outbuf, True)) // self._t.extent if self._t.extent > 0 else 0
        native = bytearray(source[start : start + count * self._t.size])
        _swap(self._t, memoryview(native))
        self.Unpack(native, 0, outbuf)
        return start + len(native)


def _datarep(datarep: str) -> None:
    if datarep != EXTERNAL32:
        raise err.Exception(err.ERR_ARG, f"unknown data representation {datarep!r} (fmpi knows {EXTERNAL32!r})")


def get_address(location: Any) -> int:
    """
    Return the address of a buffer's first byte (0 for None and MPI.BOTTOM)."""
    from .constants import BOTTOM

    if location is None or location is BOTTOM:
        return 0
    known = None if isinstance(location, bytearray) else getattr(location, "address", None)
    if isinstance(known, int):
        return known  # a window's memory (api.win_memory) says where it is: 0 when empty, as MPI_BOTTOM
    return np.frombuffer(_bytes(location, False), np.uint8).ctypes.data


def aint_add(base: int, disp: int) -> int:
    """
    Return the address `base` plus the displacement `disp`."""
    return int(base) + int(disp)


def aint_diff(addr1: int, addr2: int) -> int:
    """
    Return the displacement from address `addr2` to address `addr1`."""
    return int(addr1) - int(addr2)
