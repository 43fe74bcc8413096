"""The private helpers of mpi4py.MPI that mpi4py's own pure-Python modules import.

``mpi4py.util.pkl5`` (and through it ``mpi4py.futures``) does
``from ..MPI import _comm_lock, _commctx_intra, _commctx_inter``; under
fmpirun that ``MPI`` is fmpi's, so it has to offer them with mpi4py's meaning:

- ``_comm_lock(comm, key)``: a lock per communicator and key, so that threads
  sending (or receiving) big pickles in several messages do not interleave them
  (``_comm_lock_table(comm)``: all of them; the object collectives mpi4py locks,
  ``bcast``/``gather``/``scatter``/``allgather``/``alltoall``, hold theirs too);
- ``_commctx_intra(comm)``: a private duplicate of `comm` (made once, by the
  first collective call that needs it: every member makes that call) and a fresh
  tag for each call, so that pkl5's collectives, built from point-to-point
  messages, never match the user's own messages;
- ``_commctx_inter(comm)``: the same for an intercommunicator, with an
  intracommunicator of its local group.
"""

from __future__ import annotations

import threading
from typing import Any

from .constants import TAG_UB

_guard = threading.Lock()


def _state(comm: Any) -> dict:
    # Kept in the communicator's instance dict, which every Python handle on it shares (Comm.__new__).
    with _guard:
        return comm.__dict__.setdefault("_mpi4py_state", {"locks": {}, "ctx": None, "tag": 0})


def _comm_lock(comm: Any, key: Any = None) -> Any:
    """The communicator's lock named `key` (a plain ``threading.Lock``, as mpi4py's), made on first use."""
    state = _state(comm)
    with _guard:
        return state["locks"].setdefault(key, threading.Lock())


def _comm_lock_table(comm: Any) -> dict:
    """The communicator's locks by name (mpi4py's test suite inspects it)."""
    return _state(comm)["locks"]


def _commctx_intra(comm: Any) -> tuple[Any, int]:
    state = _state(comm)
    if state["ctx"] is None:
        state["ctx"] = comm.Dup()
    with _guard:
        state["tag"] = state["tag"] % TAG_UB + 1
        return state["ctx"], state["tag"]


def _commctx_inter(comm: Any) -> tuple[Any, int, Any, bool]:
    """
    Return the context mpi4py.util.pkl5 uses for collectives on intercommunicator `comm`.

    That is (a private duplicate of `comm`, a fresh tag, an intracommunicator of the local group, whether the local
    group is the low one): made once, by the first collective call that needs them, which both groups make."""
    from .intracomm import Intracomm, _child_context

    state = _state(comm)
    if state["ctx"] is None:
        state["local"] = Intracomm(comm._engine, comm._group, _child_context(comm._ctx, 0, f"local:{comm._group}"))
        state["ctx"] = comm.Dup()
    with _guard:
        state["tag"] = state["tag"] % TAG_UB + 1
        return state["ctx"], state["tag"], state["local"], comm._group[0] < comm._remote[0]
