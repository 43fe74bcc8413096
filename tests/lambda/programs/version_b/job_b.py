"""Job B of the version test: deployed to the same function while job A's ranks are still starting."""

from mpi4py import MPI

print(f"rank {MPI.COMM_WORLD.rank} runs B", flush=True)
