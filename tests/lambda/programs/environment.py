"""Each rank prints the variables fmpirun was asked to pass (and one it was not)."""

import os

from mpi4py import MPI

names = ("MY_SETTING", "GIVEN_HERE", "FMPI_COLL_ALGO", "NOT_PASSED")
print(f"rank {MPI.COMM_WORLD.rank}: " + " ".join(f"{n}={os.environ.get(n)}" for n in names), flush=True)
