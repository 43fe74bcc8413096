"""``MPI.Intercomm``: the class exists (mpi4py.util.pkl5 subclasses it, programs test
``isinstance`` against it); fmpi creates no intercommunicators yet, so making one
raises MPI's error for an unsupported operation, which mpi4py's tests read as
"feature absent"."""

from __future__ import annotations

from typing import Any

from . import exceptions as err
from .comm import Comm


class Intercomm(Comm):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise err.Exception(err.ERR_UNSUPPORTED_OPERATION, "intercommunicators are not supported by fmpi")

    def Is_inter(self) -> bool:
        return True

    def Is_intra(self) -> bool:
        return False
