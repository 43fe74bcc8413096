"""The mpi4py-compatible facade: ``from fmpi import MPI`` (or, under fmpirun, ``from mpi4py import MPI``).

Importing this module initializes MPI, as importing ``mpi4py.MPI`` does.
"""

from .api import runtime as _runtime
from .api.comm import (
    ERRHANDLER_NULL,
    ERRORS_ABORT,
    ERRORS_ARE_FATAL,
    ERRORS_RETURN,
    Comm,
    Errhandler,
)
from .api.constants import *  # noqa: F401,F403 - the MPI constants
from .api.datatypes import DATATYPES as _DATATYPES
from .api.datatypes import Datatype
from .api.exceptions import *  # noqa: F401,F403 - error classes
from .api.exceptions import Exception, Get_error_class, Get_error_string  # noqa: A004
from .api.group import GROUP_EMPTY, GROUP_NULL, Group
from .api.topology import CART, DIST_GRAPH, GRAPH, Cartcomm
from .api.topology import compute_dims as Compute_dims
from .api.intracomm import COMM_TYPE_HW_GUIDED, COMM_TYPE_HW_UNGUIDED, COMM_TYPE_RESOURCE_GUIDED, Intracomm
from .api.op import BAND, BOR, BXOR, LAND, LOR, LXOR, MAX, MAXLOC, MIN, MINLOC, NO_OP, OP_NULL, PROD, REPLACE, SUM, Op
from .api.request import REQUEST_NULL, Request
from .api.status import Status

globals().update(_DATATYPES)  # MPI.DOUBLE, MPI.INT, ...

_runtime.initialize()

COMM_WORLD: Intracomm = _runtime.state.world
COMM_SELF: Intracomm = _runtime.state.self_comm
COMM_NULL = None


def Init() -> None:
    _runtime.initialize()


def Init_thread(required: int = 3) -> int:
    _runtime.initialize()
    return 3  # THREAD_MULTIPLE: the transport is thread-safe


def Query_thread() -> int:
    return 3


def Is_thread_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def Finalize() -> None:
    _runtime.finalize()


def Is_initialized() -> bool:
    return _runtime.state.initialized


def Is_finalized() -> bool:
    return _runtime.state.finalized


def Wtime() -> float:
    return _runtime.wtime()


def Wtick() -> float:
    return _runtime.wtick()


def Get_processor_name() -> str:
    return _runtime.processor_name()


def Get_version() -> tuple[int, int]:
    return (3, 1)


def Get_library_version() -> str:
    from . import __version__

    return f"fmpi {__version__}"


def Abort(errorcode: int = 0) -> None:
    COMM_WORLD.Abort(errorcode)
