"""Rank 1 sleeps far longer than the function timeout; the others wait for it."""

import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
print(f"rank {comm.rank} started", flush=True)
if comm.rank == 1:
    time.sleep(60)
comm.barrier()
