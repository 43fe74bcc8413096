"""Stand-in for mpi4py on the path of ranks started by fmpirun.

``from mpi4py import MPI`` in an unchanged mpi4py program resolves to
``fmpi.MPI``. This directory is put only on the ranks' PYTHONPATH, so a real
mpi4py installed elsewhere is untouched.
"""

__version__ = "4.1.2+fmpi"


def get_include() -> str:
    raise RuntimeError("fmpi provides no C headers: mpi4py's C API is not available under fmpirun")


def get_config() -> dict:
    return {"fmpi": True}


class _RC:
    """mpi4py.rc. fmpi initializes when MPI is imported (as mpi4py does by default); of the
    rest, ``errors`` is honoured ("exception", "default"/"fatal", "abort"; see fmpi.api.runtime)."""

    initialize = True
    finalize = True
    threads = True
    thread_level = "multiple"
    errors = "exception"


rc = _RC()
