"""Where fmpirun's standard input goes (``--stdin``), as mpiexec does: to rank 0 by default.

A program such as mpi4py's compute-pi demo reads ``input()`` on rank 0; the
other ranks get ``/dev/null``. ``--stdin RANK`` picks another rank (that rank
inherits fmpirun's stdin itself: no copy, and a terminal stays a terminal),
``--stdin none`` gives every rank ``/dev/null``, and ``--stdin all`` copies the
input to every rank through a pipe each.
"""

from __future__ import annotations

import os
import subprocess
import threading
from typing import IO

CHUNK = 64 * 1024


def plan(spec: str | None, size: int) -> int | str:
    """The ``--stdin`` choice checked against the job: a rank number, "all" or "none"."""
    if spec is None:
        return 0
    if spec in ("all", "none"):
        return spec
    try:
        rank = int(spec)
    except ValueError:
        raise ValueError(f"--stdin takes a rank number, 'all' or 'none', not {spec!r}") from None
    if not 0 <= rank < size:
        raise ValueError(f"--stdin {rank}: there is no rank {rank} in a job of {size} ranks")
    return rank


def for_rank(target: int | str, rank: int) -> int | None:
    """The ``stdin=`` argument of rank `rank`'s Popen."""
    if target == "all":
        return subprocess.PIPE
    return None if target == rank else subprocess.DEVNULL


def fan_out(pipes: list[IO[bytes]]) -> None:
    """--stdin all: copy fmpirun's stdin to every rank's pipe until it ends (in a daemon thread,
    so a terminal nobody types into does not hold fmpirun at exit)."""

    def run() -> None:
        live = list(pipes)
        while live:
            try:
                data = os.read(0, CHUNK)
            except OSError:
                data = b""
            for pipe in list(live):
                try:
                    if data:
                        pipe.write(data)
                        pipe.flush()
                    else:
                        pipe.close()
                except OSError:  # that rank closed its stdin or exited: the others still get theirs
                    live.remove(pipe)
            if not data:
                return

    threading.Thread(target=run, name="fmpirun-stdin", daemon=True).start()
