"""Where the mpi4py shim lives: the directory put first on a rank's PYTHONPATH so that
``from mpi4py import MPI`` resolves to ``fmpi.MPI`` (local ranks and Lambda ranks alike)."""

from pathlib import Path

SHIM_DIR = str(Path(__file__).resolve().parent / "shim")
