"""Every rank talks to every other rank (so every link forms), then a ring exchange and an allreduce.

    python exchange.py [BIG_BYTES]     also pass a BIG_BYTES array around the ring

Prints "rank R ok SUM" when every check passed.
"""

import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
big = int(sys.argv[1]) if len(sys.argv) > 1 else 0

# all pairs: in round k, send to rank+k and receive from rank-k
for k in range(1, size):
    dest, source = (rank + k) % size, (rank - k) % size
    got = comm.sendrecv({"from": rank, "round": k}, dest=dest, source=source)
    assert got == {"from": source, "round": k}, got

# ring exchange of a buffer, checked byte for byte
right, left = (rank + 1) % size, (rank - 1) % size
out = np.arange(max(big, 1) // 8 + 1, dtype=np.float64) * (rank + 1)
back = np.empty_like(out)
comm.Sendrecv(out, dest=right, recvbuf=back, source=left)
assert np.array_equal(back, np.arange(back.size, dtype=np.float64) * (left + 1))

# allreduce
total = comm.allreduce(rank + 1)
assert total == size * (size + 1) // 2, total
vec = np.full(1000, rank, dtype=np.int64)
summed = np.empty_like(vec)
comm.Allreduce(vec, summed)
assert (summed == sum(range(size))).all()
comm.Barrier()
print(f"rank {rank} ok {total}", flush=True)
