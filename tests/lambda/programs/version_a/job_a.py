"""Job A of the version test: every rank says it runs A's code."""

from mpi4py import MPI

print(f"rank {MPI.COMM_WORLD.rank} runs A", flush=True)
