"""Every rank streams numbered messages around the ring until the test says stop; every one must arrive once, in order.

    python ring_until.py STOP_FILE

Prints "streaming" once the first round went around (the test then cuts
connections), and "rank R ok ROUNDS SUM" at the end. Messages of several
sizes (one of 600 kB: several relay chunks, so a cut can fall inside it),
some synchronous; every 8 rounds an allreduce (server-side under --channel
relay) and a bcast of rank 0's decision to stop, taken when STOP_FILE exists.
"""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
stop_file = sys.argv[1]
right, left = (rank + 1) % size, (rank - 1) % size
sizes = [0, 16, 3000, 70_000, 600_000]


def payload(source: int, i: int) -> np.ndarray:
    return np.full(sizes[i % len(sizes)], (source * 31 + i) % 251, dtype=np.uint8)


i = total = 0
stop = False
while not stop:
    send = comm.Issend(payload(rank, i), dest=right, tag=i % 1000) if i % 7 == 3 else comm.Isend(payload(rank, i), dest=right, tag=i % 1000)
    got = np.empty(sizes[i % len(sizes)], dtype=np.uint8)
    comm.Recv(got, source=left, tag=i % 1000)
    assert np.array_equal(got, payload(left, i)), f"message {i} from rank {left} is wrong"
    send.Wait()
    if i == 0:
        print("streaming", flush=True)
    if i % 8 == 7:
        total += comm.allreduce(i + rank)
        stop = comm.bcast(os.path.exists(stop_file) if rank == 0 else None, root=0)
    i += 1
    time.sleep(0.002)
comm.Barrier()
print(f"rank {rank} ok {i} {total}", flush=True)
