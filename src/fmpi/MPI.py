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
from .api.info import INFO_ENV, INFO_NULL, MAX_INFO_KEY, MAX_INFO_VAL, Info
from .api.memory import BSEND_OVERHEAD, Alloc_mem, Attach_buffer, Detach_buffer, Flush_buffer, Free_mem, buffer, memory
from .api.pickler import Pickle, pickle
from .api.message import MESSAGE_NO_PROC, MESSAGE_NULL, Message
from .api.intercomm import Intercomm
from .api.absent import FILE_NULL, SESSION_NULL, WIN_NULL, Distgraphcomm, File, Graphcomm, Session, Topocomm, Win
from .api.mpi4py_internals import _comm_lock, _commctx_inter, _commctx_intra  # noqa: F401 - for mpi4py.util.pkl5
from .api.topology import CART, DIST_GRAPH, GRAPH, Cartcomm
from .api.topology import compute_dims as Compute_dims
from .api.intracomm import COMM_TYPE_HW_GUIDED, COMM_TYPE_HW_UNGUIDED, COMM_TYPE_RESOURCE_GUIDED, Intracomm
from .api.op import BAND, BOR, BXOR, LAND, LOR, LXOR, MAX, MAXLOC, MIN, MINLOC, NO_OP, OP_NULL, PROD, REPLACE, SUM, Op
from .api.persistent import Prequest
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
    return (VERSION, SUBVERSION)


def get_vendor() -> tuple[str, tuple[int, int, int]]:
    """("fmpi", its version): what mpi4py reports for the MPI library underneath."""
    from . import __version__

    numbers = [int(part) for part in __version__.split("+")[0].split(".")[:3] if part.isdigit()]
    return "fmpi", tuple((numbers + [0, 0, 0])[:3])


def Pcontrol(level: int) -> None:
    """Profiling control: fmpi has no profiling layer, so any level is accepted and ignored (as MPI allows)."""
    if not isinstance(level, int):
        raise TypeError(f"Pcontrol level must be an int, not {type(level).__name__}")


def Get_library_version() -> str:
    from . import __version__

    return f"fmpi {__version__}"


def Abort(errorcode: int = 0) -> None:
    COMM_WORLD.Abort(errorcode)
