"""Rank 2 raises while the others wait for it in a collective."""

from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.rank == 2:
    raise ValueError("rank two cannot go on")
comm.barrier()
print("unreachable", flush=True)
