"""Non-blocking collectives: a per-communicator thread runs them in the background.

``Ibcast`` and friends prepare their buffers and checks in the caller's
thread, then hand the algorithm to the communicator's worker, which runs the
same code as the blocking call, on a tag of its own, and completes the
request's op when done. The caller gets an ``MPI.Request`` at once and
computes meanwhile: the worker sleeps in the transport's waits (which release
the GIL), numpy reductions release it too.

MPI requires every rank to start a communicator's non-blocking collectives
in the same order; the worker runs them one at a time in that order, so the
n-th one on each rank meets the n-th one on all others. A thread per
communicator (not per process) keeps collectives on different communicators
independent, as MPI allows them to be started in different orders.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from ..transport.engine import Engine
from ..transport.requests import Op, TransportError
from . import exceptions as err


class Worker:
    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, engine: Engine, job: Callable[[], None]) -> Op:
        """Run `job` after the jobs submitted before it; the returned op completes with it."""
        op = engine.new_op()

        def run() -> None:
            error = None
            try:
                job()
            except TransportError as exc:
                error = exc
            except err.Exception as exc:
                error = TransportError(str(exc), _class_name(exc.Get_error_class()), exc._cause)
            except Exception as exc:  # a bad argument found late: report it through the request
                error = TransportError(f"{type(exc).__name__}: {exc}", "ERR_OTHER")
            engine.finish_op(op, error)

        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
        self._queue.put(run)
        return op

    def stop(self) -> None:
        with self._lock:
            if self._thread is not None:
                self._queue.put(None)
                self._thread = None

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            job()


def _class_name(code: int) -> str:
    return err._NAMES.get(code, "ERR_OTHER")
