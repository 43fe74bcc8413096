"""Shared by the check programs: case counting, FAIL lines, deterministic data."""

from __future__ import annotations

import hashlib
import sys
import traceback

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
FMPI = "fmpi" in MPI.Get_library_version()  # False when a program runs under MPICH to validate itself
_cases = 0
_fails = 0


def case(ok: bool, what: str) -> None:
    global _cases, _fails
    _cases += 1
    if not ok:
        _fails += 1
        if _fails <= 50:
            print(f"FAIL rank {rank}: {what}", flush=True)


def attempt(fn, what: str) -> None:
    """Run one case; an exception counts as a failure with its traceback."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        case(False, f"{what}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")


def finish() -> None:
    total = comm.allreduce(_cases)
    if rank == 0:
        print(f"CASES {total}", flush=True)
    sys.stdout.flush()


def digest(arr) -> str:
    return hashlib.sha1(np.ascontiguousarray(arr).view(np.uint8)).hexdigest()


def data(r: int, count: int, dtype, salt: int = 0, small: bool = True) -> np.ndarray:
    """Rank r's deterministic input: small integers (exact in every dtype), or random floats."""
    rng = np.random.default_rng(10_000 * salt + 97 * r + count)
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return (rng.integers(-3, 4, count) + 1j * rng.integers(-3, 4, count)).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, count).astype(dtype)
    if small or dtype.kind in "iu":
        return rng.integers(-3 if dtype.kind != "u" else 0, 4, count).astype(dtype)
    return rng.standard_normal(count).astype(dtype)


def use_large_path() -> None:
    """Every size threshold at 0 and 24-byte segments: small data through the large-message
    algorithms (rings, scatter-allgather, ring-gather, linear gather/scatter), in many segments.
    A no-op under MPICH (where these programs run to validate their own expectations)."""
    if not FMPI:
        return
    from fmpi.collectives import table

    table.configure(
        forced={},
        segment=24,
        bcast_large=0,
        reduce_large=0,
        allreduce_large_min=0,
        allreduce_ring_min=0,
        reduce_scatter_ring_min=0,
        allgather_ring_min=0,
        gather_binomial_max=0,
        alltoall_eager_max=0,
        alltoall_window=1,
    )


def use_algorithms(forced: str) -> None:
    """The default table, with FMPI_COLL_ALGO-style choices forced (no-op under MPICH)."""
    if FMPI:
        from fmpi.collectives import table

        table.reset()
        table.configure(forced=forced)
