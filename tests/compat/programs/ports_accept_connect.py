"""Differential: Open_port, Accept, Connect, Comm.Join and Close_port, with what each side sees.

Rank 0 accepts (on COMM_SELF) twice at one port: first the group of the other ranks connects, then
rank 1 alone. Then the other ranks accept and rank 0 connects (it may come first). Then ranks 0 and 1
Join over a socket. Every process writes its lines to argv[1]/rank<r>.txt.
"""

import socket
import sys

from mpi4py import MPI

world = MPI.COMM_WORLD
rank = world.rank
others = world.Split(0 if rank else MPI.UNDEFINED, rank)
out = open(f"{sys.argv[1]}/rank{rank}.txt", "w")


def show(name, inter):
    print(name, rank, inter.Is_inter(), inter.rank, inter.size, inter.remote_size, file=out)
    root = MPI.ROOT if inter.rank == 0 and name.endswith("A") else (MPI.PROC_NULL if name.endswith("A") else 0)
    got = inter.bcast({"from": name, "rank": rank} if root == MPI.ROOT else None, root)
    print(name, rank, "bcast", got, file=out)
    print(name, rank, "allgather", inter.allgather(rank), file=out)
    merged = inter.Merge(high=not name.endswith("A"))
    print(name, rank, "merged", merged.rank, merged.size, merged.allreduce(rank), file=out)
    merged.Free()
    inter.Disconnect()
    print(name, rank, "disconnected", inter == MPI.COMM_NULL, file=out)


# 1. rank 0 accepts at a port it opened; the others connect as one group, then rank 1 alone.
if rank == 0:
    port = MPI.Open_port()
    print("port", isinstance(port, str), len(port) <= MPI.MAX_PORT_NAME, file=out)
    world.send(port, dest=1)
    show("first A", MPI.COMM_SELF.Accept(port))
    show("second A", MPI.COMM_SELF.Accept(port, MPI.INFO_NULL, 0))
    MPI.Close_port(port)
else:
    port = world.recv(source=0) if rank == 1 else None
    show("first C", others.Connect(port, root=0))
    if rank == 1:
        show("second C", MPI.COMM_SELF.Connect(port))

# 2. the other ranks accept (their root opened the port), rank 0 connects.
if rank == 0:
    show("third C", MPI.COMM_SELF.Connect(world.recv(source=1)))
else:
    port = MPI.Open_port() if rank == 1 else ""
    if rank == 1:
        world.send(port, dest=0)
    show("third A", others.Accept(port, root=0))
    if rank == 1:
        MPI.Close_port(port)

# 3. Comm.Join over a connected socket between ranks 0 and 1.
if rank == 0:
    server = socket.create_server(("127.0.0.1", 0))
    world.send(server.getsockname(), dest=1)
    conn = server.accept()[0]
    server.close()
elif rank == 1:
    conn = socket.create_connection(world.recv(source=0))
if rank in (0, 1):
    inter = MPI.Comm.Join(conn.fileno())
    conn.close()
    print("join", rank, inter.size, inter.remote_size, inter.sendrecv(rank, dest=0, source=0), file=out)
    inter.Disconnect()
world.Barrier()
out.close()
