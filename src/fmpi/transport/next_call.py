"""Work that waits for the rank's program to call into the engine again.

MPI gives a process's memory to other ranks' one-sided operations only when that process lets it: on MPICH
over TCP a target applies nothing until it is inside an MPI call. fmpi's windows apply requests without the
target's help (``api/rma_target``), which is more than MPI promises and, right after a window is created,
more than some programs expect: mpi4py's nxtval demo stores the counter's first value into its fresh window
with no synchronization and relies on nobody's additions landing before that store. So a new window holds
the origins' requests until its rank's next call into the engine — the functions registered here run at
the start of that call.

Threads that serve others rather than the program (a reader serving a window's requests: ``inbox.py``) enter
the engine too; they mark themselves (``serving``) and do not count as the program's call.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator


class NextCall:
    """Functions to run once, at the start of the program's next engine call (from any of its threads)."""

    def __init__(self) -> None:
        self.pending: list[Callable[[], None]] = []  # read without the lock: the engine's fast check
        self._lock = threading.Lock()
        self._serving = threading.local()

    def add(self, fn: Callable[[], None]) -> None:
        with self._lock:
            self.pending = [*self.pending, fn]

    def discard(self, fn: Callable[[], None]) -> None:
        with self._lock:
            self.pending = [f for f in self.pending if f is not fn]

    def run(self) -> None:
        """The program entered the engine (its caller saw ``pending``): run and forget every function."""
        if getattr(self._serving, "on", False):
            return
        with self._lock:
            fns, self.pending = self.pending, []
        for fn in fns:
            fn()

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Around engine calls made for another rank's request: they are not the program's calls."""
        before = getattr(self._serving, "on", False)
        self._serving.on = True
        try:
            yield
        finally:
            self._serving.on = before
