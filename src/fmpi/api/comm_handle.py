"""What mpi4py asks of every communicator besides communicating (mixed into ``Comm``): info
hints, the topology kind, pickling, and the MPI 4.1 per-communicator send buffers.

Pickling follows mpi4py: COMM_WORLD and COMM_SELF travel by name and unpickle to
themselves (another handle on them, to another handle); any other communicator
cannot be pickled (ValueError), its context being meaningless elsewhere.
"""

from __future__ import annotations

from typing import Any, NoReturn

from .constants import UNDEFINED
from .info import Info


def predefined(name: str) -> Any:
    """COMM_WORLD or COMM_SELF of this process (what a pickled one unpickles to)."""
    from . import runtime

    return runtime.state.world if name == "COMM_WORLD" else runtime.state.self_comm


class CommHandle:
    def __reduce__(self) -> tuple:
        for name in ("COMM_WORLD", "COMM_SELF"):
            comm = predefined(name)
            if comm is not None and self.__dict__ is comm.__dict__:
                return (predefined, (name,)) if self is comm else (type(self), (comm,))
        raise ValueError(f"cannot pickle {self!r}: only COMM_WORLD and COMM_SELF can be, as in mpi4py")

    def Set_info(self, info: Info) -> None:
        """Hints are accepted and ignored (fmpi takes none), as MPI allows; Get_info gives them back."""
        self.__dict__["_info"] = dict(info.items()) if info else {}

    def Get_info(self) -> Info:
        return Info.Create(self.__dict__.get("_info", {}))

    info = property(Get_info, Set_info)

    def Get_topology(self) -> int:
        return UNDEFINED

    @property
    def topology(self) -> int:
        return self.Get_topology()

    def Attach_buffer(self, *args: Any) -> NoReturn:
        raise NotImplementedError("per-communicator send buffers (MPI 4.1; fmpi reports MPI 3.1): use MPI.Attach_buffer")

    Detach_buffer = Flush_buffer = Iflush_buffer = Attach_buffer
