"""Monte Carlo estimate of pi: embarrassingly parallel sampling + one reduce.

Demonstrates: COMM_WORLD, bcast (the sample count), reduce (SUM of hits).
Runs unchanged under `mpiexec -n N python apps/pi.py` and `fmpirun -n N python apps/pi.py`.
The result is deterministic for a given N and --samples (each rank seeds by its rank).

    fmpirun -n 4 python apps/pi.py --samples 4000000
"""

import argparse

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--samples", type=int, default=2_000_000, help="total samples over all ranks")
args = parser.parse_args()

total = comm.bcast(args.samples if comm.rank == 0 else None, root=0)
mine = total // comm.size + (1 if comm.rank < total % comm.size else 0)

start = MPI.Wtime()
rng = np.random.default_rng(seed=12345 + comm.rank)
hits = 0
for chunk in range(0, mine, 1_000_000):
    n = min(1_000_000, mine - chunk)
    x, y = rng.random(n), rng.random(n)
    hits += int(np.count_nonzero(x * x + y * y <= 1.0))

all_hits = comm.reduce(hits, op=MPI.SUM, root=0)
if comm.rank == 0:
    estimate = 4.0 * all_hits / total
    print(f"pi ~= {estimate:.6f} (error {abs(estimate - np.pi):.2e}) from {total} samples on {comm.size} ranks")
    print(f"time {MPI.Wtime() - start:.3f} s")
