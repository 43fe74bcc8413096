"""``Intracomm.Spawn`` / ``Spawn_multiple`` and ``Comm.Get_parent``: processes started at run time.

The new processes run in a job of their own that the parents join too
(``rank/spawn.py``); ``Spawn`` returns the parents' side of the
intercommunicator between the two groups, ``Get_parent`` the children's. On
the spawned job's transport the parents are slots 0..P-1 and the children
P..P+C-1; the intercommunicator has the same context id on both sides,
``PARENT_CONTEXT``, beside the children's COMM_WORLD and COMM_SELF (0 and 2).
"""

from __future__ import annotations

import operator
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


def _root_arguments(command: Any, args: Any, maxprocs: Any, info: Any) -> tuple[list, list, list[int]]:
    """Spawn_multiple's arguments at the root as lists of one entry per command, read as mpi4py reads them:
    one string of arguments, one maxprocs or one Info stands for every command; a list must have one entry per
    command (ValueError). The other ranks' arguments are not significant (MPI), and not read."""
    if isinstance(command, (str, bytes, os.PathLike)) or not isinstance(command, Sequence):
        raise ValueError("expecting a sequence of path-like")
    commands = [os.fsdecode(c) for c in command]
    count = len(commands)

    def per_command(value: Any, single: bool) -> list:
        if single:
            return [value] * count
        if len(value) != count:
            raise ValueError(f"expecting {count} items, got {len(value)}")
        return list(value)

    argvs = [] if args is None else per_command(args, isinstance(args, (str, bytes)))
    argvs = [_argv(a) for a in argvs] or [[] for _ in commands]
    per_command(info, info is None or isinstance(info, Info))
    maxprocs = 1 if maxprocs is None else maxprocs
    counts = [operator.index(n) for n in per_command(maxprocs, _integral(maxprocs))]
    return commands, argvs, counts


def _argv(arguments: Any) -> list[str]:
    """One command's arguments: None is none, one string is one argument (as mpi4py's asarray_argv)."""
    if arguments is None:
        return []
    return [os.fsdecode(arguments)] if isinstance(arguments, (str, bytes)) else [os.fsdecode(a) for a in arguments]


def _integral(value: Any) -> bool:
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def spawn_multiple(comm: Intracomm, command: Any, args: Any, maxprocs: Any, info: Any, root: int,
                   errcodes: list | None, single: bool = False) -> Intercomm:
    """Collective over `comm`: its root starts maxprocs[i] processes of command[i] + args[i], for each i.

    Arguments the root refuses raise ValueError there and end the call on the other ranks with ERR_SPAWN
    (under MPICH they would wait in the spawn for good). `single`: Spawn's errcodes, one flat list.
    """
    root = comm._root(root)
    outcome: Any = None
    if comm.rank == root:
        try:
            commands, argvs, counts = _root_arguments(command, args, maxprocs, info)
        except ValueError as exc:
            comm.bcast(f"Spawn: the root's arguments were refused: {exc}", root)
            raise
        outcome = _start(comm.size, commands, argvs, counts), counts
    outcome = comm.bcast(outcome, root)
    if isinstance(outcome, str):
        comm._fail(err.ERR_SPAWN, outcome)
    spawned, counts = outcome
    if isinstance(spawned, str):
        comm._fail(err.ERR_SPAWN, spawned)
    try:
        session = spawning.join_as_parent(spawned, comm.rank)
    except (RelayError, SpecError, OSError) as exc:
        comm._fail(err.ERR_SPAWN, f"Spawn: the spawned processes did not join: {exc}")
    runtime.state.spawned.append(session)
    if errcodes is not None:  # (every process started: MPI.SUCCESS for each, per command as mpi4py lists them)
        errcodes[:] = [0] * counts[0] if single else [[0] * n for n in counts]
    parents = spawned.parents
    inter = Intercomm(session.engine, tuple(range(parents)), PARENT_CONTEXT, "", tuple(range(parents, session.size)))
    inter._errhandler = comm._errhandler
    inter._session = session  # (left at Disconnect)
    return inter


def _start(parents: int, commands: list[str], args: list[list[str]], maxprocs: list[int]) -> Any:
    """At the root: the spawned job (or why there is none, as the text every parent raises)."""
    session = runtime.state.session
    if session is None:
        return "Spawn: this process is not an fmpi rank (run it under fmpirun): there is no relay to meet the new processes at"
    if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        return "Spawn: not supported on the Lambda backend yet (new ranks would be new invocations); see docs/compatibility.md"
    if any(n < 1 for n in maxprocs):
        return f"Spawn: maxprocs {maxprocs}: every command needs at least one process"
    lines = [[command, *argv] for command, argv, n in zip(commands, args, maxprocs) for _ in range(n)]
    try:
        spawned, children = spawning.start(session.spec.relay, parents, lines)
    except (RelayError, OSError) as exc:
        return f"Spawn: could not start {lines[0][0]!r}: {exc}"
    runtime.state.children.append(children)
    return spawned
