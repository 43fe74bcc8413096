"""``MPI.Status``: who sent a received message, with which tag, and how long it was."""

from __future__ import annotations

from .constants import ANY_SOURCE, ANY_TAG
from .datatypes import DATATYPES, Datatype


class Status:
    __slots__ = ("source", "tag", "error", "_nbytes", "_cancelled")

    def __init__(self) -> None:
        self.source = ANY_SOURCE
        self.tag = ANY_TAG
        self.error = 0
        self._nbytes = 0
        self._cancelled = False

    def _set(self, source: int, tag: int, nbytes: int, error: int = 0, cancelled: bool = False) -> None:
        self.source = source
        self.tag = tag
        self._nbytes = nbytes
        self.error = error
        self._cancelled = cancelled

    def Get_source(self) -> int:
        return self.source

    def Set_source(self, source: int) -> None:
        self.source = source

    def Get_tag(self) -> int:
        return self.tag

    def Set_tag(self, tag: int) -> None:
        self.tag = tag

    def Get_error(self) -> int:
        return self.error

    def Set_error(self, error: int) -> None:
        self.error = error

    def Get_count(self, datatype: Datatype = DATATYPES["BYTE"]) -> int:
        size = datatype.Get_size()
        if size == 0:
            return 0
        return self._nbytes // size if self._nbytes % size == 0 else -32766  # MPI_UNDEFINED

    Get_elements = Get_count

    def Set_elements(self, datatype: Datatype, count: int) -> None:
        self._nbytes = count * datatype.Get_size()

    @property
    def count(self) -> int:
        return self.Get_count()

    def Is_cancelled(self) -> bool:
        return self._cancelled

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def __repr__(self) -> str:
        return f"<Status source={self.source} tag={self.tag} count={self._nbytes} error={self.error}>"
