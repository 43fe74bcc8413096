"""The private helpers of mpi4py.MPI that mpi4py's own pure-Python modules import.

``mpi4py.util.pkl5`` (and through it ``mpi4py.futures``) does
``from ..MPI import _comm_lock, _commctx_intra, _commctx_inter``; under
fmpirun that ``MPI`` is fmpi's, so it has to offer them with mpi4py's meaning:

- ``_comm_lock(comm, key)``: a lock per communicator and key, so that threads
  sending (or receiving) big pickles in several messages do not interleave them;
- ``_commctx_intra(comm)``: a private duplicate of `comm` (made once, by the
  first collective call that needs it: every member makes that call) and a fresh
  tag for each call, so that pkl5's collectives, built from point-to-point
  messages, never match the user's own messages.
"""

from __future__ import annotations

import threading
from typing import Any

from . import exceptions as err
from .constants import TAG_UB

_guard = threading.Lock()


def _state(comm: Any) -> dict:
    # Kept in the communicator's instance dict, which every Python handle on it shares (Comm.__new__).
    with _guard:
        return comm.__dict__.setdefault("_mpi4py_state", {"locks": {}, "ctx": None, "tag": 0})


def _comm_lock(comm: Any, key: Any = None) -> threading.RLock:
    state = _state(comm)
    with _guard:
        return state["locks"].setdefault(key, threading.RLock())


def _commctx_intra(comm: Any) -> tuple[Any, int]:
    state = _state(comm)
    if state["ctx"] is None:
        state["ctx"] = comm.Dup()
    with _guard:
        state["tag"] = state["tag"] % TAG_UB + 1
        return state["ctx"], state["tag"]


def _commctx_inter(comm: Any) -> tuple[Any, int, Any, int]:
    raise err.Exception(err.ERR_UNSUPPORTED_OPERATION, "intercommunicators are not supported by fmpi")
