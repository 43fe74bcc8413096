"""``Intracomm.Spawn`` / ``Spawn_multiple`` and ``Comm.Get_parent``: processes started at run time.

The new processes run in a job of their own that the parents join too
(``rank/spawn.py``); ``Spawn`` returns the parents' side of the
intercommunicator between the two groups, ``Get_parent`` the children's. On
the spawned job's transport the parents are slots 0..P-1 and the children
P..P+C-1; the intercommunicator has the same context id on both sides,
``PARENT_CONTEXT``, beside the children's COMM_WORLD and COMM_SELF (0 and 2).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..rank import spawn as spawning
from ..rank.spec import SpecError
from ..transport.engine import Engine
from ..wire.errors import RelayError
from . import exceptions as err
from . import runtime
from .intercomm import INTER_BIT, Intercomm
from .info import Info
from .intracomm import Intracomm

PARENT_CONTEXT = INTER_BIT | 4


def parent_intercomm(engine: Engine, parents: int) -> Intercomm:
    """A spawned process's side of the intercommunicator with its parents."""
    return Intercomm(engine, tuple(range(parents, engine.size)), PARENT_CONTEXT, "", tuple(range(parents)))


def disconnected(inter: Intercomm) -> None:
    """`inter` was disconnected: if it joined parents and children, this process leaves the spawned job."""
    state = runtime.state
    if inter.__dict__ is getattr(state.parent, "__dict__", None):
        state.parent = None  # Get_parent gives COMM_NULL from now on (MPI)
    session = inter.__dict__.pop("_session", None)
    if session is not None and session in state.spawned:
        state.spawned.remove(session)
        session.finalize(0)


def get_parent() -> Intercomm:
    """The intercommunicator with the parents, or a null one (equal to COMM_NULL) in a process not spawned."""
    return runtime.state.parent if runtime.state.parent is not None else Intercomm()


def spawn_arguments(command: Any, args: Any, maxprocs: Any, info: Any) -> tuple[list, list, list]:
    """Spawn_multiple's arguments as lists of one entry per command, checked as mpi4py does (ValueError)."""
    if isinstance(command, str) or not isinstance(command, Sequence):
        raise ValueError("Spawn_multiple: command must be a sequence of strings")
    count = len(command)

    def per_command(value: Any, what: str, single: type) -> list:
        if isinstance(value, single) or value is None:
            return [value] * count
        if isinstance(value, str) or len(value) != count:
            raise ValueError(f"Spawn_multiple: expecting {count} {what}")
        return list(value)

    args = [None] * count if args is None else args
    if isinstance(args, str) or len(args) != count or any(isinstance(a, str) for a in args):
        raise ValueError(f"Spawn_multiple: expecting {count} argument lists")
    per_command(info, "info objects", Info)
    return list(command), list(args), per_command(1 if maxprocs is None else maxprocs, "maxprocs", int)


def spawn_multiple(
    comm: Intracomm, commands: Sequence[str], args: Sequence[Sequence[str] | None], maxprocs: Sequence[int], root: int,
    errcodes: list | None,
) -> Intercomm:
    """Collective over `comm`: its root starts maxprocs[i] processes of commands[i] + args[i], for each i."""
    root = comm._root(root)
    outcome: Any = None
    if comm.rank == root:
        outcome = _start(comm.size, commands, args, maxprocs)
    outcome = comm.bcast(outcome, root)
    if isinstance(outcome, str):
        comm._fail(err.ERR_SPAWN, outcome)
    try:
        session = spawning.join_as_parent(outcome, comm.rank)
    except (RelayError, SpecError, OSError) as exc:
        comm._fail(err.ERR_SPAWN, f"Spawn: the spawned processes did not join: {exc}")
    runtime.state.spawned.append(session)
    if errcodes is not None:
        errcodes[:] = [0] * outcome.children
    parents = outcome.parents
    inter = Intercomm(session.engine, tuple(range(parents)), PARENT_CONTEXT, "", tuple(range(parents, session.size)))
    inter._errhandler = comm._errhandler
    inter._session = session  # (left at Disconnect)
    return inter


def _start(parents: int, commands: Sequence[str], args: Sequence[Sequence[str] | None], maxprocs: Sequence[int]) -> Any:
    """At the root: the spawned job (or why there is none, as the text every parent raises)."""
    session = runtime.state.session
    if session is None:
        return "Spawn: this process is not an fmpi rank (run it under fmpirun): there is no relay to meet the new processes at"
    if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        return "Spawn: not supported on the Lambda backend yet (new ranks would be new invocations); see docs/compatibility.md"
    if not len(commands) == len(args) == len(maxprocs) or any(n < 1 for n in maxprocs):
        return f"Spawn: {len(commands)} commands, {len(args)} argument lists and maxprocs {list(maxprocs)} do not match"
    lines = [[command, *(argv or [])] for command, argv, n in zip(commands, args, maxprocs) for _ in range(n)]
    try:
        spawned, children = spawning.start(session.spec.relay, parents, lines)
    except (RelayError, OSError) as exc:
        return f"Spawn: could not start {lines[0][0]!r}: {exc}"
    runtime.state.children.append(children)
    return spawned
