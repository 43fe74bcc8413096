"""fmpi: MPI for serverless functions, with the mpi4py API.

``from fmpi import MPI`` (or ``from mpi4py import MPI`` under ``fmpirun``).
"""

__version__ = "0.1.0"
