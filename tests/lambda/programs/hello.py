"""No messages between ranks: rank, size and the processor name only."""

from mpi4py import MPI

comm = MPI.COMM_WORLD
print(f"hello from rank {comm.rank} of {comm.size}", flush=True)
