"""Rank 0 and rank 1 stream numbered messages both ways for a while; every one must arrive once, in order.

    python stream.py COUNT

Prints "streaming" once the link is up (the test then breaks the link), and
"rank R ok" at the end. Messages of several sizes, some synchronous.
"""

import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.rank
count = int(sys.argv[1])
peer = 1 - rank
sizes = [0, 16, 3000, 70_000]

comm.sendrecv("hello", dest=peer, source=peer)  # the link is up
print("streaming", flush=True)
reqs = []
for i in range(count):
    data = np.full(sizes[i % len(sizes)], (rank * 31 + i) % 251, dtype=np.uint8)
    if i % 25 == 3:
        reqs.append(comm.Issend(data, dest=peer, tag=i % 1000))
    else:
        reqs.append(comm.Isend(data, dest=peer, tag=i % 1000))
    probe = np.empty(sizes[i % len(sizes)], dtype=np.uint8)
    comm.Recv(probe, source=peer, tag=i % 1000)
    assert probe.size == sizes[i % len(sizes)] and (probe == (peer * 31 + i) % 251).all(), f"message {i} is wrong"
    if len(reqs) > 16:
        MPI.Request.Waitall(reqs)
        reqs = []
    time.sleep(0.002)
MPI.Request.Waitall(reqs)
comm.Barrier()
print(f"rank {rank} ok", flush=True)
