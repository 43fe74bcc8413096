"""``mpi4py.MPI`` under fmpirun is ``fmpi.MPI`` itself (same module object)."""

import sys

import fmpi.MPI

sys.modules[__name__] = fmpi.MPI
