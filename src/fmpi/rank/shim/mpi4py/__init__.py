"""Stand-in for mpi4py on the path of ranks started by fmpirun.

``from mpi4py import MPI`` in an unchanged mpi4py program resolves to
``fmpi.MPI``. This directory is put only on the ranks' PYTHONPATH, so a real
mpi4py installed elsewhere is untouched.

mpi4py's pure-Python subpackages (``mpi4py.util``, ``mpi4py.futures``,
``mpi4py.run``, ``python -m mpi4py``, ...) are not reimplemented: when a real
mpi4py is installed, its directory is appended to this package's ``__path__``,
so those modules load from it and import ``MPI`` from here, i.e. fmpi's.
"""

import sys
from importlib.machinery import PathFinder
from pathlib import Path

__version__ = "4.1.2+fmpi"

_HERE = Path(__file__).resolve().parent


def _real_mpi4py_dir() -> "Path | None":
    """The directory of an mpi4py installed beside this shim (on sys.path after it), if any."""
    others = [p for p in sys.path if Path(p or ".").resolve() != _HERE.parent]
    spec = PathFinder.find_spec("mpi4py", others)
    if spec is None or not spec.submodule_search_locations:
        return None
    found = Path(next(iter(spec.submodule_search_locations))).resolve()
    return None if found == _HERE else found


_REAL = _real_mpi4py_dir()
if _REAL is not None:
    __path__.append(str(_REAL))


def get_include() -> str:
    raise RuntimeError("fmpi provides no C headers: mpi4py's C API is not available under fmpirun")


def get_config() -> dict:
    return {}


class Rc:
    """mpi4py.rc: the runtime options mpi4py has, with its rules (unknown names raise TypeError).

    fmpi initializes when MPI is imported (as mpi4py does by default) and always gives
    THREAD_MULTIPLE; of the rest, ``errors`` is honoured ("exception", "default"/"fatal",
    "abort"; see fmpi.api.runtime), and ``recv_mprobe``/``irecv_bufsz`` are read by nothing."""

    initialize = True
    threads = True
    thread_level = "multiple"
    finalize = None
    fast_reduce = True
    recv_mprobe = True
    irecv_bufsz = 32768
    errors = "exception"

    def __init__(self, **kwargs) -> None:
        self(**kwargs)

    def __setattr__(self, name: str, value) -> None:
        if not hasattr(self, name):
            raise TypeError(f"object has no attribute {name!r}")
        super().__setattr__(name, value)

    def __call__(self, **kwargs) -> None:
        for key in kwargs:
            if not hasattr(self, key):
                raise TypeError(f"unexpected argument {key!r}")
        for key, value in kwargs.items():
            setattr(self, key, value)

    def __repr__(self) -> str:
        return "<mpi4py.rc>"


rc = Rc()
sys.modules[__name__ + ".rc"] = rc  # ``import mpi4py.rc`` works, as with mpi4py
