"""A job with something of everything the cost report counts: a 1 MiB bcast (over the relay with --channel relay),
and checkpoints saved to FMPI_CHECKPOINT_URL (with FMPI_CHECKPOINT_EVERY=0, one per call)."""

import numpy as np
from mpi4py import MPI

from fmpi import checkpoint

comm = MPI.COMM_WORLD
data = np.arange(1 << 17, dtype=np.float64) if comm.rank == 0 else np.empty(1 << 17)
comm.Bcast(data, root=0)
for step in range(1, 3):
    checkpoint.save({"data": data[:16], "step": step}, step)
print(f"rank {comm.rank} sum {data.sum():.0f}")
