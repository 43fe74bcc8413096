"""Each rank says which process it is and whom COMM_TYPE_SHARED grouped it with (one JSON line per rank)."""

import json
import os

from mpi4py import MPI

comm = MPI.COMM_WORLD
node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
members = node.allgather(comm.rank)
# The node communicator works on its own: a sum over it, and a world allreduce to show the two stay in step.
node_sum = node.allreduce(comm.rank)
world_sum = comm.allreduce(comm.rank)
print(json.dumps({"rank": comm.rank, "pid": os.getpid(), "node_rank": node.rank, "node_size": node.size,
                  "members": members, "node_sum": node_sum, "world_sum": world_sum}), flush=True)
node.Free()
