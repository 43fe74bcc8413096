"""Output must reach the launcher while the rank still runs: a line, a pause, another line."""

import time

from mpi4py import MPI

print("first line", flush=True)
print("partial line without newline", end="", flush=True)
time.sleep(1.5)
print(flush=True)
print("second line", flush=True)
MPI.COMM_WORLD.barrier()
