"""Rank 1 holds the GIL in one long C call, so no other thread of its process (the handler's timeout
watchdog, the transport's heartbeats) runs again: only the platform's kill at the function timeout ends
it. Rank 0 finishes at once, so rank 1 is the only rank left for the platform to stop."""

from mpi4py import MPI

comm = MPI.COMM_WORLD
print(f"rank {comm.rank} started", flush=True)
if comm.rank == 1:
    sum(range(10**12))  # C all the way (range iterator, int adds): no bytecode boundary to drop the GIL at
