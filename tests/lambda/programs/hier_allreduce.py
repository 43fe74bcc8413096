"""A buffer Allreduce (int64 sums, 256 KiB per rank), a Bcast from rank 0 and a Reduce to rank 2; each rank
prints whether its results are right and which ranks it made links to (a rank that only talked to its
function's first rank has one link)."""

import json

import numpy as np
from mpi4py import MPI

from fmpi.api import runtime

comm = MPI.COMM_WORLD
send = np.arange(1 << 15, dtype=np.int64) * (comm.rank + 1)
recv = np.empty_like(send)
comm.Allreduce(send, recv)
expected = np.arange(1 << 15, dtype=np.int64) * sum(range(1, comm.size + 1))
right = bool(np.array_equal(recv, expected))
data = send if comm.rank == 0 else np.zeros_like(send)
comm.Bcast(data, root=0)
right &= bool(np.array_equal(data, np.arange(1 << 15, dtype=np.int64)))
comm.Reduce(send, recv if comm.rank == 2 else None, op=MPI.SUM, root=2)
right &= comm.rank != 2 or bool(np.array_equal(recv, expected))
peers = sorted(s["peer"] for s in runtime.state.engine.link_stats())
print(json.dumps({"rank": comm.rank, "right": right, "peers": peers}), flush=True)
