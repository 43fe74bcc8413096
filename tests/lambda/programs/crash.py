"""Rank 1 dies without finalizing (as if the runtime crashed); the others wait for it."""

import os

from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.rank == 1:
    os._exit(3)
comm.barrier()
