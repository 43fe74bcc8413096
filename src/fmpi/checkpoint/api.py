"""save() and restore(): each rank's state kept consistently across ranks, and the world stopped before its deadline.

A checkpoint counts only once ``manifest.json`` names it, and rank 0 writes
the manifest only after every rank has said its part is stored; the parts of
older steps are deleted only after that. A rank killed mid-checkpoint
therefore leaves the newest complete checkpoint as it was.

The stopping policy: a save() finds the time left before the platform's
deadline (``fmpi.remaining_time()``) shorter than the margin plus twice the
longest stretch seen between two save() calls (one more iteration must still
fit), so it writes a checkpoint and ends every rank with ``RESUME_EXIT``;
``fmpirun --max-runtime`` launches the world again, and restore() continues
from that step. All ranks decide together, in one small Allreduce, and only
as often as needed: the vote also fixes how many calls pass before the next.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from .. import remaining_time, settings
from ..wire import pickle_oob
from .stores import Store, open_store

if TYPE_CHECKING:
    from mpi4py import MPI

#: The exit status of a world stopped at a checkpoint to be launched again (EX_TEMPFAIL).
RESUME_EXIT = 75
MANIFEST = "manifest.json"
FORMAT = 1
MAX_SKIP = 1000

T = TypeVar("T")


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; raised on every rank alike."""


class _Clock:
    """What the policy remembers between calls (per process: one job per rank process)."""

    def __init__(self) -> None:
        self.last_call: float | None = None
        self.last_save = time.monotonic()
        self.longest_gap = 0.0
        self.last_write = 0.0
        self.skip = 0  # save() calls left before the ranks vote again


_clock = _Clock()
_stores: dict[str, Store] = {}


def _store(url: str) -> Store:
    if url not in _stores:
        _stores[url] = open_store(url)
    return _stores[url]


def _part_key(step: int, rank: int) -> str:
    return f"step-{step:012d}/rank-{rank}"


def _mpi():
    # (the program's own MPI: fmpi's under fmpirun, where the mpi4py shim maps it; imported only when
    # checkpointing is on, so a program run under mpiexec never touches fmpi's MPI)
    from mpi4py import MPI

    return MPI


def restore(state: T = None, step: int = 0, *, comm: MPI.Comm | None = None) -> tuple[T, int]:
    """The newest complete checkpoint's (state, step) for this rank, or the given ones when there is none.

    Collective over `comm` (default COMM_WORLD). Without FMPI_CHECKPOINT_URL
    (a program run outside fmpirun's checkpointing) it returns its arguments.
    """
    config = settings.checkpointing()
    if config.url is None:
        return state, step
    comm = comm or _mpi().COMM_WORLD
    store = _store(config.url)
    manifest = _read_manifest(store, config.url) if comm.rank == 0 else None
    manifest = comm.bcast(manifest, root=0)
    if isinstance(manifest, str):
        raise CheckpointError(manifest)
    if manifest is None:
        _clock.last_call = time.monotonic()
        return state, step
    if manifest["size"] != comm.size:
        raise CheckpointError(f"the checkpoint at {config.url} (step {manifest['step']}) was written by "
                              f"{manifest['size']} ranks; this world has {comm.size}: restart with -n {manifest['size']}")
    data = store.get(_part_key(manifest["step"], comm.rank))
    missing = [r for r, present in enumerate(comm.allgather(data is not None)) if not present]
    if missing:
        raise CheckpointError(f"the checkpoint at {config.url} (step {manifest['step']}) has no part for ranks {missing}")
    _clock.last_save = _clock.last_call = time.monotonic()  # (the first save() then measures one whole iteration)
    if comm.rank == 0:
        print(f"fmpi: continuing from the checkpoint of step {manifest['step']} ({config.url})", file=sys.stderr, flush=True)
    return pickle_oob.loads(data), manifest["step"]


def save(state: Any, step: int, *, comm: MPI.Comm | None = None) -> bool:
    """At an iteration boundary: store `state` as this rank's part of checkpoint `step` when one is due.

    Due: FMPI_CHECKPOINT_EVERY seconds after the last one (0: every call), or
    when the time left is short — then the world ends after the checkpoint,
    with status ``RESUME_EXIT``. Collective over `comm`; True when written.
    """
    config = settings.checkpointing()
    if config.url is None:
        return False
    comm = comm or _mpi().COMM_WORLD
    now = time.monotonic()
    if _clock.last_call is not None:
        _clock.longest_gap = max(_clock.longest_gap, now - _clock.last_call)
    _clock.last_call = now
    if _clock.skip:
        _clock.skip -= 1
        return False
    # Seconds to spare before the stop must come (one more iteration and one more write must still fit).
    slack = remaining_time() - config.margin - 2 * _clock.longest_gap - 2 * _clock.last_write
    every_left = config.every - (now - _clock.last_save)
    votes = np.array([-min(slack, 1e18), -every_left, _clock.longest_gap])
    mpi = _mpi()
    comm.Allreduce(mpi.IN_PLACE, votes, op=mpi.MAX)  # the least slack, the least time to the next one, the slowest
    slack, every_left, gap = -votes[0], -votes[1], votes[2]
    if slack > 0 and every_left > 0:
        # Not now. The next vote comes a quarter of the way to the nearer of the two, in calls (the same count
        # on every rank: it is computed from agreed numbers), so a fast loop does not pay a collective per step.
        _clock.skip = min(MAX_SKIP, int(min(slack, every_left) / (4 * gap))) if gap > 0 else 0
        return False
    _write(_store(config.url), config.url, state, step, comm)
    _clock.last_save = time.monotonic()
    _clock.last_write = _clock.last_save - now
    if slack <= 0:
        _stop(step, comm)
    return True


def _write(store: Store, url: str, state: Any, step: int, comm: MPI.Comm) -> None:
    error = None
    try:
        store.put(_part_key(step, comm.rank), pickle_oob.dumps(state))
    except Exception as exc:  # noqa: BLE001 - every rank must hear of it, so it is carried, not raised here
        error = f"rank {comm.rank}: {type(exc).__name__}: {exc}"
    errors = [e for e in comm.allgather(error) if e]
    if errors:
        raise CheckpointError(f"checkpoint of step {step} to {url} failed: {'; '.join(errors)}")
    if comm.rank == 0:
        try:
            store.put(MANIFEST, [json.dumps({"format": FORMAT, "step": step, "size": comm.size,
                                             "written": time.time()}).encode()])
            keep = _part_key(step, 0).split("/")[0] + "/"
            store.delete([k for k in store.keys("step-") if not k.startswith(keep)])
        except Exception as exc:  # noqa: BLE001 - carried to every rank, as above
            error = f"rank 0: {type(exc).__name__}: {exc}"
    error = comm.bcast(error, root=0)  # (also: nobody leaves before the manifest is written)
    if error:
        raise CheckpointError(f"checkpoint of step {step} to {url} failed: {error}")


def _read_manifest(store: Store, url: str) -> dict | str | None:
    """The manifest, None when there is none, or the error as a message (sent to every rank)."""
    try:
        raw = store.get(MANIFEST)
        if raw is None:
            return None
        manifest = json.loads(raw)
        if manifest.get("format") != FORMAT:
            return f"the checkpoint at {url} has format {manifest.get('format')!r}; this fmpi reads {FORMAT}"
        return manifest
    except Exception as exc:  # noqa: BLE001 - carried to every rank, as above
        return f"cannot read the checkpoint at {url}: {type(exc).__name__}: {exc}"


def _stop(step: int, comm: MPI.Comm) -> None:
    if comm.rank == 0:
        print(f"fmpi: {remaining_time():.1f} s left before the platform's deadline: stopped at the checkpoint of "
              f"step {step} (fmpirun --max-runtime launches the job again from there)", file=sys.stderr, flush=True)
    sys.exit(RESUME_EXIT)
