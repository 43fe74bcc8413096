"""``MPI.Status``: who sent a received message, with which tag, and how long it was."""

from __future__ import annotations

from array import array

from .constants import ANY_SOURCE, ANY_TAG
from .datatypes import DATATYPES, Datatype


_EMPTY = (0, 0, ANY_SOURCE, ANY_TAG, 0)  # an empty status's five C ints (see Status)


class Status:
    """Status of a received message: its source, tag, error, size and whether it was cancelled.

    Its fields live in five C ints laid out as MPICH's ``MPI_Status`` (count low word, count high bits and the
    cancelled flag, source, tag, error), so ``tomemory()`` can hand them out writable."""

    __slots__ = ("_fields", "__weakref__")

    def __init__(self, status: Status | None = None) -> None:
        """An empty status, or (``Status(status)``) a copy of `status`, as in mpi4py."""
        if status is not None and not isinstance(status, Status):
            raise TypeError(f"expecting a Status, not {type(status).__name__}")
        self._fields = array("i", _EMPTY if status is None else status._fields)

    def _set(self, source: int, tag: int, nbytes: int, error: int = 0, cancelled: bool = False) -> None:
        self.source, self.tag, self.error = source, tag, error
        self._nbytes, self._cancelled = nbytes, cancelled

    source = property(lambda self: self._fields[2], lambda self, v: self._fields.__setitem__(2, v))
    tag = property(lambda self: self._fields[3], lambda self, v: self._fields.__setitem__(3, v))
    error = property(lambda self: self._fields[4], lambda self, v: self._fields.__setitem__(4, v))

    @property
    def _nbytes(self) -> int:
        low, high = self._fields[0], self._fields[1]
        return (low & 0xFFFFFFFF) | ((high >> 1) << 32)

    @_nbytes.setter
    def _nbytes(self, nbytes: int) -> None:
        low = nbytes & 0xFFFFFFFF
        self._fields[0] = low - (1 << 32) if low >= 1 << 31 else low
        self._fields[1] = ((nbytes >> 32) << 1) | (self._fields[1] & 1)

    @property
    def _cancelled(self) -> bool:
        return bool(self._fields[1] & 1)

    @_cancelled.setter
    def _cancelled(self, flag: bool) -> None:
        self._fields[1] = (self._fields[1] & ~1) | int(bool(flag))

    def tomemory(self) -> memoryview:
        """
        Return the status's memory (five C ints, as MPICH's MPI_Status), writable: writes change the status."""
        return memoryview(self._fields)

    def __reduce__(self) -> tuple:
        return _rebuild, (type(self), list(self._fields))

    def py2f(self) -> list[int]:
        """The Fortran status (MPI.F_STATUS_SIZE integers, source at MPI.F_SOURCE...): MPICH's are its C ints."""
        return list(self._fields)

    @classmethod
    def f2py(cls, arg: list[int]) -> Status:
        """The status a Fortran status (``py2f``) describes."""
        return _rebuild(cls, [int(arg[i]) for i in range(len(_EMPTY))])

    def Get_source(self) -> int:
        """
        Return the rank of the message's source."""
        return self.source

    def Set_source(self, source: int) -> None:
        """
        Set the rank of the message's source."""
        self.source = source

    def Get_tag(self) -> int:
        """
        Return the message's tag."""
        return self.tag

    def Set_tag(self, tag: int) -> None:
        """
        Set the message's tag."""
        self.tag = tag

    def Get_error(self) -> int:
        """
        Return the error code of the operation."""
        return self.error

    def Set_error(self, error: int) -> None:
        """
        Set the error code of the operation."""
        self.error = error

    def Get_count(self, datatype: Datatype = DATATYPES["BYTE"]) -> int:
        """
        Return the number of `datatype` elements received (UNDEFINED if the bytes are not a whole number of them)."""
        size = datatype._live().size  # DATATYPE_NULL: ERR_TYPE, as MPICH
        if size == 0:
            return 0
        return self._nbytes // size if self._nbytes % size == 0 else -32766  # MPI_UNDEFINED

    def Get_elements(self, datatype: Datatype) -> int:
        """
        Return the number of basic elements received: for a derived type of one element type, the number of those."""
        dtype = datatype._live().dtype
        if dtype is None or datatype._t.predefined or not dtype.itemsize:
            return self.Get_count(datatype)
        return self._nbytes // dtype.itemsize

    def Set_elements(self, datatype: Datatype, count: int) -> None:
        """
        Set the size received to `count` elements of `datatype`."""
        self._nbytes = count * datatype._live().size

    @property
    def count(self) -> int:
        return self.Get_count()

    @count.setter
    def count(self, count: int) -> None:
        self.Set_elements(DATATYPES["BYTE"], count)

    def Is_cancelled(self) -> bool:
        """
        Tell whether the operation was cancelled."""
        return self._cancelled

    def Set_cancelled(self, flag: bool) -> None:
        """
        Set whether the operation was cancelled."""
        self._cancelled = bool(flag)

    cancelled = property(Is_cancelled, Set_cancelled)

    def __eq__(self, other: object) -> bool:
        """Statuses compare by their fields, as mpi4py's (and so are unhashable)."""
        if not isinstance(other, Status):
            return NotImplemented
        return self._fields == other._fields

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<Status source={self.source} tag={self.tag} count={self._nbytes} error={self.error}>"


def _rebuild(cls: type, fields: list[int]) -> Status:
    status = cls.__new__(cls)
    status._fields = array("i", fields)
    return status
