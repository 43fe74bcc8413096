"""Process-wide MPI state: initialization, the predefined communicators, finalization, abort.

As with mpi4py, importing ``fmpi.MPI`` initializes: under fmpirun (or any
launcher that set the rank environment) the rank joins its job; otherwise it
is a world of one, so scripts still run with plain ``python``.
"""

from __future__ import annotations

import atexit
import operator
import os
import socket
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

from .. import settings
from ..transport.engine import Engine
from . import exceptions as err

if TYPE_CHECKING:
    from ..rank.join import RankSession
    from ..rank.spawn import Children
    from .intercomm import Intercomm
    from .intracomm import Intracomm

WORLD_CONTEXT = 0
SELF_CONTEXT = 2


class _State:
    session: "RankSession | None" = None
    engine: Engine | None = None
    server: Any = None  # server-side collectives of the rank's relay (collectives/server_side.Provider), or None
    world: "Intracomm | None" = None
    self_comm: "Intracomm | None" = None
    parent: "Intercomm | None" = None  # a spawned process's intercommunicator with its parents (Comm.Get_parent)
    spawned: "list[RankSession]" = []  # this process's sessions in jobs it spawned (as a parent)
    children: "list[Children]" = []  # the processes this process spawned (as the root), waited for at finalize
    ports: "set[str]" = set()  # the port names this process opened and has not closed (Open_port)
    initialized = False
    finalized = False
    abort_status = 0  # MPI._set_abort_status's: nonzero, the job is aborted with it at exit
    lock = threading.Lock()


state = _State()


def initialize(session: "RankSession | None" = None) -> None:
    """
    Join the job (or become a world of one); calling it again does nothing.

    A caller that has joined already (the Lambda handler, which must handle a refused join itself) passes its
    `session`; otherwise the rank joins from the environment fmpirun set."""
    from ..rank.join import join
    from ..rank.spec import RankSpec, SpecError, slot_in_environment
    from ..wire.errors import RelayError
    from .intracomm import Intracomm

    with state.lock:
        if state.initialized:
            return
        try:
            spec = RankSpec.from_env() if session is None else None
            if session is not None or spec is not None:
                state.session = session if session is not None else join(spec)
                state.engine = state.session.engine
                state.server = state.session.server_collectives
            else:
                state.engine = Engine(0, 1, os.urandom(16), lambda _rank: [], None)
        except (SpecError, RelayError) as exc:
            where = slot_in_environment()
            print(f"fmpi: rank {where}: cannot join the job: {exc}", file=sys.stderr)
            sys.stderr.flush()
            os._exit(1)  # not SystemExit: nothing else in this process can work
        engine = state.engine
        # A spawned process's job holds its parents first; its world is the rest.
        parents = state.session.spec.parents if state.session is not None else 0
        state.world = Intracomm(engine, tuple(range(parents, engine.size)), WORLD_CONTEXT, "MPI_COMM_WORLD")
        if parents:
            from .spawn import parent_intercomm

            state.parent = parent_intercomm(engine, parents)
        state.self_comm = Intracomm(engine, (engine.rank,), SELF_CONTEXT, "MPI_COMM_SELF")
        handler = _errhandler_from_rc()
        state.world.Set_errhandler(handler)
        state.self_comm.Set_errhandler(handler)
        state.initialized = True
        atexit.register(_at_exit)
        if state.session is not None:
            _install_excepthook()


def _errhandler_from_rc():
    """The error handler mpi4py's ``rc.errors`` asks for (set before importing MPI), as mpi4py does.

    "exception" (mpi4py's default): errors raise MPI.Exception (ERRORS_RETURN);
    an uncaught one still aborts the whole job. "default" / "fatal": MPI's own
    default, ERRORS_ARE_FATAL: the job aborts where the error happens. "abort":
    ERRORS_ABORT. ``FMPI_ERRORS`` sets the same from outside the program (and wins).
    """
    from .errhandler import ERRORS_ABORT, ERRORS_ARE_FATAL, ERRORS_RETURN

    rc = getattr(sys.modules.get("mpi4py"), "rc", None)
    choice = settings.current().errors or getattr(rc, "errors", None) or "exception"
    handlers = {"exception": ERRORS_RETURN, "default": ERRORS_ARE_FATAL, "fatal": ERRORS_ARE_FATAL, "abort": ERRORS_ABORT}
    if choice not in handlers:
        print(f"fmpi: mpi4py.rc.errors / FMPI_ERRORS must be one of {', '.join(handlers)}, not {choice!r}; using 'exception'",
              file=sys.stderr)
        return ERRORS_RETURN
    return handlers[choice]


def set_abort_status(status: int) -> None:
    """
    Set the status the job is aborted with at exit, MPI still running (0: no abort).

    This is mpi4py's ``MPI._set_abort_status``: what mpi4py.run and mpi4py.futures call when the program ends on an
    exception."""
    state.abort_status = int(operator.index(status))


def _at_exit() -> None:
    """Python's exit: abort with the status set by ``_set_abort_status`` unless MPI was finalized (mpi4py's
    atexit does the same), else finalize."""
    if state.abort_status and state.initialized and not state.finalized:
        abort(state.abort_status, f"the program ended on an error (abort status {state.abort_status})")
    finalize()


def finalize() -> None:
    """
    Leave the job: what MPI.Finalize and the exit of a process that has not called it do."""
    with state.lock:
        if state.finalized or not state.initialized:
            return
        state.finalized = True
    sys.stdout.flush()
    _close_server()
    for session in state.spawned:
        session.finalize(0)
    if state.session is not None:
        state.session.finalize(0)
    elif state.engine is not None:
        state.engine.close()
    for children in state.children:
        children.wait()


def _close_server() -> None:
    server, state.server = state.server, None
    if server is not None:
        try:
            server.close()
        except Exception:  # noqa: BLE001 - its connections die with the process anyway
            pass


def server_collective_calls() -> dict[str, int]:
    """Completed server-side collective calls of this rank, per collective (empty: none, or no provider)."""
    return dict(state.server.calls) if state.server is not None else {}


def abort(code: int, reason: str, cause: dict | None = None) -> None:
    """End every rank of the job with exit status `code`.

    `cause`: what this failure is a consequence of, if it is one (a peer's
    death, an earlier abort); the launcher then names that, not this rank.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    if state.session is not None:
        state.session.abort(code, reason, cause)
    os._exit(code)


def _install_excepthook() -> None:
    # An uncaught exception on one rank would leave the others blocked on it
    # forever: print it, then abort the job (what `python -m mpi4py` does).
    previous = sys.excepthook

    def hook(kind, value, tb) -> None:
        cause = err.cause_of(value)
        rank = state.engine.rank if state.engine is not None else "?"
        reason = f"uncaught {kind.__name__} on rank {rank}: {value}"
        if issubclass(kind, KeyboardInterrupt):
            previous(kind, value, tb)
        elif cause is None:
            traceback.print_exception(kind, value, tb)
        else:
            # A consequence of another rank's end (or of an earlier abort): fmpirun names
            # that rank; this one's traceback would bury it (mpiexec kills such ranks quietly).
            reason += _where_the_program_was(tb)
        abort(1, reason, cause)

    sys.excepthook = hook


def _where_the_program_was(tb) -> str:
    """' (in prog.py:12)': the innermost frame of the program's own code (not fmpi's) in traceback `tb`."""
    fmpi_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    where = ""
    for frame in traceback.extract_tb(tb):
        if not os.path.abspath(frame.filename).startswith(fmpi_dir + os.sep):
            where = f" (in {os.path.basename(frame.filename)}:{frame.lineno})"
    return where


def wtime() -> float:
    """
    Return a monotonic wall-clock time in seconds (``time.perf_counter``)."""
    return time.perf_counter()


def wtick() -> float:
    """
    Return the resolution of wtime in seconds."""
    return time.get_clock_info("perf_counter").resolution


def processor_name() -> str:
    """
    Return this host's name."""
    return socket.gethostname()


def node_id() -> str:
    """What ranks that share a machine have in common: FMPI_NODE (on Lambda, the function instance: its ranks
    share its CPUs and its capped network; host names say nothing there), else the host name."""
    from .. import settings

    return settings.node() or socket.gethostname()


def take_over_finalize() -> bool:
    """For the code hosting the program (the Lambda handler): True when the program left MPI unfinalized and the
    host now ends it (the rank counts as finalized from here); False when the program finalized already."""
    with state.lock:
        done, state.finalized = state.finalized, True
    return not done


def reset_for_next_invocation() -> None:
    """Forget this process's MPI state, so that the process can serve another rank of another job.

    For the Lambda handler: a warm sandbox runs the next invocation in the same
    process, and nothing of the previous job may leak into it. The handler
    finalizes (or aborts) the rank first; a session still open here is abandoned.
    """
    with state.lock:
        if state.engine is not None and not state.finalized:
            state.engine.abandon()
        _close_server()
        state.session = None
        state.engine = None
        state.world = None
        state.self_comm = None
        state.parent = None
        state.spawned, state.children, state.ports = [], [], set()
        state.initialized = False
        state.finalized = False
        state.abort_status = 0
    atexit.unregister(_at_exit)
