"""The fault-tolerance calls of MPI 5 (ULFM) as MPICH without fault tolerance has them: nothing has failed.

fmpi ends a job when one of its ranks is lost (the launcher names the rank;
``fmpi.checkpoint`` is how a job outlives it), so a communicator that still
runs has no failed process. These calls then mean what they mean under
MPICH built without ULFM, which mpi4py's users meet on most systems:
``Agree`` is the bitwise AND of every member's flag (of the remote group's
on an intercommunicator), ``Shrink`` a duplicate, ``Get_failed`` an empty group,
``Ack_failed`` 0, ``Is_revoked`` False; ``Revoke`` raises NotImplementedError,
as mpi4py does over an MPI without it (its tests skip on that).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .arguments import c_int
from .constants import IN_PLACE
from .group import Group
from .op import BAND
from .request import Request

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


class FaultTolerance:
    """Needs ``_live``, ``Dup``, ``Is_inter``, and on intra/intercommunicators ``_blocking``, ``_nonblocking``
    and ``_plan_allreduce`` (``collective_calls``, ``collective_buffers``, ``intercomm_buffers``)."""

    def Is_revoked(self) -> bool:
        self._live()
        return False

    def Revoke(self) -> None:
        self._live()
        raise NotImplementedError(
            "Comm.Revoke: fmpi has no fault-tolerant MPI (nor has MPICH without ULFM): a lost rank ends the "
            "job; fmpi.checkpoint restarts it from its last checkpoint"
        )

    def Get_failed(self) -> Group:
        self._live()
        return Group(())

    def Ack_failed(self, num_to_ack: int | None = None) -> int:
        self._live()
        if num_to_ack is not None:
            c_int(num_to_ack)
        return 0

    def Shrink(self) -> Any:
        self._live()
        return self.Dup()

    def Ishrink(self) -> tuple[Any, Request]:
        return self.Shrink(), Request.completed()

    def Agree(self, flag: int) -> int:
        """The bitwise AND of every member's `flag` (a C int); of the remote group's on an intercommunicator."""
        self._live()
        value = np.array([_as_c_int(flag)], dtype=np.intc)
        self._blocking(self._agree_plan(value))
        return int(value[0])

    def Iagree(self, flag: Any) -> Request:
        """Agree, started: `flag` (a writable buffer of one C int, format 'i') holds the result once done."""
        self._live()
        view = memoryview(flag)  # (a TypeError for what is not a buffer, as in mpi4py)
        if view.readonly:
            raise BufferError("underlying buffer is not writable")
        if view.format != "i":
            raise ValueError(f"expecting buffer with format 'i', got '{view.format}'")
        return self._nonblocking(self._agree_plan(np.frombuffer(view, dtype=np.intc, count=1)))

    def _agree_plan(self, value: np.ndarray) -> Any:
        """The allreduce that leaves in `value` the AND the call agrees on (an intercommunicator's allreduce
        reduces the remote group's values, which is what ULFM's agreement gives there too)."""
        if self.Is_inter():
            return self._plan_allreduce(value.copy(), value, BAND)
        return self._plan_allreduce(IN_PLACE, value, BAND)


def _as_c_int(flag: Any) -> int:
    """`flag` as mpi4py's Agree takes it: a C int (a float truncated)."""
    value = c_int(flag)
    if not _INT_MIN <= value <= _INT_MAX:
        raise OverflowError("value too large to convert to int")
    return value
