"""Every rank exits through sys.exit: rank 1 with status 4, the others with 0."""

import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
comm.barrier()
sys.exit(4 if comm.rank == 1 else 0)
