"""Hello world: every rank reports in, rank 0 collects the names in rank order."""
from mpi4py import MPI

comm = MPI.COMM_WORLD
names = comm.gather(f"rank {comm.rank} of {comm.size}", root=0) if hasattr(comm, "gather") else None
print(f"hello from rank {comm.Get_rank()} of {comm.Get_size()}")
