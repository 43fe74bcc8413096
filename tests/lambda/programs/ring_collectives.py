"""A ring pass and the basic collectives, one summary line per rank (used by the Lambda end-to-end tests)."""

import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

# Ring: the token goes once around, each rank adds its rank.
if size > 1:
    if rank == 0:
        comm.send(0, dest=1, tag=7)
        token = comm.recv(source=size - 1, tag=7)
    else:
        token = comm.recv(source=rank - 1, tag=7) + rank
        comm.send(token, dest=(rank + 1) % size, tag=7)
else:
    token = 0

comm.barrier()
greeting = comm.bcast({"from": "root", "args": sys.argv[1:]} if rank == 0 else None, root=0)
total = comm.reduce(rank + 1, op=MPI.SUM, root=0)
biggest = comm.allreduce(rank, op=MPI.MAX)
print(f"rank {rank}/{size} token={token if rank == 0 else '-'} bcast={greeting['args']} max={biggest} sum={total}", flush=True)
