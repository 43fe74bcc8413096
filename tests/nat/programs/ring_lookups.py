"""A ring exchange only (each rank talks to its two neighbours), then which peers' records the rank looked up.

Prints "rank R ok looked up A,B": the world names no peer, so a rank looks up
the records of the peers it links to, and only those.
"""

from mpi4py import MPI

from fmpi.api.runtime import state

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
right, left = (rank + 1) % size, (rank - 1) % size
got = comm.sendrecv(rank, dest=right, source=left)
assert got == left, got
got = comm.sendrecv(rank, dest=left, source=right)
assert got == right, got
assert state.engine is not None
print(f"rank {rank} ok looked up {','.join(map(str, state.engine.looked_up()))}", flush=True)
