from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.rank)  # 0 + 1 + ... + (size - 1) on every rank
if comm.rank == 0:
    comm.send({"greeting": "hello"}, dest=comm.size - 1, tag=7)
if comm.rank == comm.size - 1:
    print(f"rank {comm.rank} of {comm.size} got {comm.recv(source=0, tag=7)}, sum of ranks {total}")
