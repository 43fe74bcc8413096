"""Leaves state behind on purpose (a module global, an environment variable, argv): a warm rerun must not see it."""

import os
import sys

import leaky_helper
from mpi4py import MPI

seen = {
    "counter": leaky_helper.bump(),
    "env": os.environ.get("LEAKY_MARK"),
    "argv": sys.argv[1:],
    "world": MPI.COMM_WORLD.size,
    "main_marker": globals().get("MARKER"),
}
os.environ["LEAKY_MARK"] = "left over"
MARKER = "set by the previous run"
print("SEEN", seen, flush=True)
