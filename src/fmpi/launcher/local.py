"""The local backend: N rank processes on this machine.

Each rank is the user's command with the rank's ``RankSpec`` in its
environment and the mpi4py shim on its PYTHONPATH; importing MPI then joins
the job through the same bootstrap a Lambda rank uses. Output is streamed
line by line (optionally tagged with the rank). The first rank to fail ends
the job: the others get an abort through the relay, and whatever is still
alive after a grace period is killed, process group and all.
"""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .. import settings
from ..rank.shim_path import SHIM_DIR
from . import closed_output, stdin_forward
from .job import Job, failure_status
from .notice_folding import NoticeFolder

KILL_GRACE = 2.0  # seconds between asking ranks to stop and killing them
FINALIZING_GRACE = 10.0  # seconds more for a rank that finalized mid-job to end by itself (its status is the news)
_PR_SET_PDEATHSIG = 1


@dataclass
class Outcome:
    code: int
    message: str | None = None


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: if fmpirun is killed outright,
    # the kernel kills the rank too, so no rank outlives its launcher.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


#: ``--bind-to`` choices: "auto" binds when the ranks outnumber the cores and share them evenly.
BIND_CHOICES = ("auto", "core", "none")


def rank_cores(size: int, bind: str, allowed: set[int] | None = None) -> list[set[int] | None]:
    """The CPU set each rank is bound to (None: left as it is), ranks spread over the allowed cores in blocks.

    Why "auto" binds when the ranks outnumber the cores and each core gets the
    same number of them: the scheduler otherwise keeps moving ranks between
    cores, each move a cold cache, and stacks waiting ranks (whose waits
    yield the core: spinning.py) on one core while workers queue on another.
    On 2 cores, bound, an 8-byte allreduce took 127-130 µs at N = 4 against
    145-173 µs unbound, and 590 µs at N = 8 against 675-725; a 1 MiB one
    4.3 ms at N = 8 against 5.4-6.1. Uneven shares stay unbound: at N = 3 the
    two ranks bound to one core were slower than a scheduler free to balance
    (8 bytes: 142-151 against 115-136 µs). With a core per rank nothing is
    bound by default either: another job on the machine would be crowded onto
    the same first cores.
    """
    cores = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    if bind == "none" or not cores or (bind == "auto" and (size <= len(cores) or size % len(cores))):
        return [None] * size
    return [{cores[rank * len(cores) // size]} for rank in range(size)]


def _start_rank(core: set[int] | None) -> None:
    """Child between fork and exec: die with fmpirun; bind to `core` (threads the rank starts inherit it)."""
    _die_with_parent()
    if core is not None:
        os.sched_setaffinity(0, core)


# Numeric libraries start one thread per core in every rank; N ranks on one
# machine would oversubscribe it N times over (k-means ran 40x slower that way).
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def rank_environment(job: Job, rank: int, base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    cores = len(os.sched_getaffinity(0)) or 1
    share = str(max(1, cores // job.size))
    for var in _THREAD_VARS:
        env.setdefault(var, share)
    # Every rank on this machine: its cores carry every byte, so the collectives keep their one-host thresholds.
    env.setdefault("FMPI_NETWORK", "host")
    if job.size > cores:
        # More ranks than cores: a rank that polls in a wait must give its core to the peers that
        # have work (sched_yield), and may poll longer: those peers' turns come before the reply.
        env.setdefault("FMPI_SPIN_US", str(settings.YIELD_SPIN_US))
        env.setdefault("FMPI_SPIN_YIELD", "1")
    env.update(job.spec(rank).to_env())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SHIM_DIR, _fmpi_root(), base.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _fmpi_root() -> str:
    """The directory holding the fmpi package, so ranks import the same fmpi as the launcher."""
    return str(Path(__file__).resolve().parents[2])


class OutputPump:
    """Copies the ranks' stdout/stderr to ours, a line at a time, on one thread."""

    def __init__(self, tag_output: bool) -> None:
        self._tag = tag_output
        self._folder = NoticeFolder()  # (on stderr: the same notice from many ranks is printed once)
        self._sel = selectors.DefaultSelector()
        self._partial: dict[int, bytes] = {}
        self._open = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="fmpirun-output", daemon=True)

    def add(self, rank: int, pipe: BinaryIO, sink: BinaryIO, fold: bool = False) -> None:
        os.set_blocking(pipe.fileno(), False)
        self._sel.register(pipe, selectors.EVENT_READ, (rank, sink, fold))
        self._open += 1

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        self._pump()
        summary = self._folder.summary()
        if summary:
            with self._lock:
                closed_output.write(sys.stderr.buffer, summary)

    def _pump(self) -> None:
        while self._open:
            for key, _ in self._sel.select():
                rank, sink, fold = key.data
                pipe = key.fileobj
                try:
                    data = pipe.read(65536)
                except BlockingIOError:
                    continue
                if not data:
                    self._sel.unregister(pipe)
                    self._open -= 1
                    rest = self._partial.pop(pipe.fileno(), b"")
                    if rest:
                        self._write(sink, rank, rest + b"\n", fold)
                    continue
                data = self._partial.pop(pipe.fileno(), b"") + data
                cut = data.rfind(b"\n") + 1
                if cut < len(data):
                    self._partial[pipe.fileno()] = data[cut:]
                if cut:
                    self._write(sink, rank, data[:cut], fold)

    def _write(self, sink: BinaryIO, rank: int, lines: bytes, fold: bool) -> None:
        if fold:
            lines = self._folder.filter(lines)
            if not lines:
                return
        if self._tag:
            prefix = f"[{rank}] ".encode()
            lines = b"".join(prefix + line for line in lines.splitlines(keepends=True))
        with self._lock:
            closed_output.write(sink, lines)


def run_local(
    job: Job, command: list[str], tag_output: bool, bind: str = "auto", stdin: str | None = None,
    on_start: Callable[[], None] | None = None,
) -> Outcome:
    """Run the job's ranks here until they end. `stdin` is fmpirun's --stdin (default: rank 0 reads fmpirun's
    input); `on_start` is called as each rank process starts."""
    target = stdin_forward.plan(stdin, job.size)
    pump = OutputPump(tag_output)
    procs: list[subprocess.Popen] = []
    base = dict(os.environ)
    cores = rank_cores(job.size, bind)
    try:
        for rank in range(job.size):
            proc = subprocess.Popen(
                command,
                env=rank_environment(job, rank, base),
                stdin=stdin_forward.for_rank(target, rank),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # Ctrl-C reaches fmpirun, which stops the ranks in order
                preexec_fn=lambda core=cores[rank]: _start_rank(core),
            )
            procs.append(proc)
            pump.add(rank, proc.stdout, sys.stdout.buffer)
            pump.add(rank, proc.stderr, sys.stderr.buffer, fold=True)
            if on_start is not None:
                on_start()
    except OSError as exc:
        _kill(procs)
        return Outcome(127, f"cannot start {command[0]!r}: {exc.strerror or exc}")
    pump.start()
    if target == "all":
        stdin_forward.fan_out([proc.stdin for proc in procs])
    try:
        outcome = _supervise(job, procs)
    except KeyboardInterrupt:
        _terminate(procs)
        outcome = Outcome(130, "interrupted; all ranks stopped")
    pump.join(timeout=5)
    return outcome


def _supervise(job: Job, procs: list[subprocess.Popen]) -> Outcome:
    """Wait for the ranks; the first failure (or a job failure at the relay) ends all of them."""
    wake = threading.Condition()
    exited: dict[int, int] = {}
    signalled: set[int] = set()  # ranks fmpirun itself killed
    spared: set[int] = set()  # ranks given time to end on their own (they finalized mid-job)

    def reap(rank: int, proc: subprocess.Popen) -> None:
        code = proc.wait()
        with wake:
            exited[rank] = code
            wake.notify()

    def on_change() -> None:
        with wake:
            wake.notify()

    job.on_change = on_change
    for rank, proc in enumerate(procs):
        threading.Thread(target=reap, args=(rank, proc), name=f"fmpirun-reap-{rank}", daemon=True).start()

    failure: Outcome | None = None
    failed_rank = -1
    kill_at: float | None = None
    seen: set[int] = set()
    with wake:
        while True:
            # (Exits are looked at before the loop can end: the last ones may arrive together; in arrival order.)
            for rank in [r for r in exited if r not in seen]:
                seen.add(rank)
                code = exited[rank]
                if code != 0 and failure is None:
                    failure = Outcome(_exit_status(code))
                    failed_rank = rank
                    job.abort(_exit_status(code), f"rank {rank} failed")
                    kill_at = time.monotonic() + KILL_GRACE
            state = job.state
            if failure is None and state.failure is not None:
                failure = Outcome(failure_status(state.failure), str(state.failure))
                kill_at = time.monotonic()
            if failure is None and state.abort is not None:
                failure = Outcome(state.abort.exit_code, str(state.abort))
                kill_at = time.monotonic() + KILL_GRACE
            hung = sorted(r for r in state.silent if r not in exited)
            if failure is None and hung:
                # Alive but mute (stopped, or stuck with its progress thread): the
                # others get PEER_LOST and would fail one by one; end it all, naming it.
                rank = hung[0]
                failure = Outcome(1, f"rank {rank} stopped responding (no heartbeat for {state.silent[rank]:g} s); all ranks stopped")
                job.abort(1, f"rank {rank} stopped responding")
                kill_at = time.monotonic()
            if kill_at is not None and time.monotonic() >= kill_at:
                # A rank that finalized while its peers still talked to it (sys.exit mid-collective) is on its
                # way out: its own exit status is the news, so it gets time to end rather than a kill.
                leaving = _finalized_mid_job(job) - set(exited) - spared
                spared |= leaving
                victims = [r for r in range(len(procs)) if r not in exited and r not in signalled and r not in leaving]
                _kill([procs[r] for r in victims], wait=False)
                signalled.update(victims)
                kill_at = time.monotonic() + FINALIZING_GRACE if leaving else None
            if len(exited) == len(procs):
                break
            wake.wait(None if kill_at is None else max(0.0, kill_at - time.monotonic()))
    if failure is not None and failure.message is None:
        # Described only now: a rank that aborts (MPI_Abort, an uncaught
        # exception) makes the others exit too, possibly before itself, and its
        # reason reaches the relay (and so us) a moment after that.
        # Likewise ranks that lost the relay exit before fmpirun's own connection to it reports the loss.
        job.wait(lambda s: s.rank_abort() is not None or s.failure is not None, timeout=1.0)
        abort = job.state.rank_abort()
        if abort is not None:
            failure = Outcome(abort.exit_code, str(abort))
        elif job.state.failure is not None:
            failure = Outcome(failure_status(job.state.failure), str(job.state.failure))
        else:
            failure.message = _describe_exit(failed_rank, exited[failed_rank])
    if failure is not None:
        failure = _root_cause(failure, failed_rank, job, exited, signalled)
    return failure or Outcome(0)


def _finalized_mid_job(job: Job) -> set[int]:
    """Ranks an abort blames for having finalized while a peer still waited on them."""
    return {a.cause["finalized"] for a in job.state.aborts if a.cause and "finalized" in a.cause}


def _root_cause(failure: Outcome, failed_rank: int, job: Job, exited: dict[int, int], signalled: set[int]) -> Outcome:
    """Name the rank that died rather than the peer that noticed it first.

    A rank killed by a signal or ended by ``os._exit`` leaves no reason of
    its own; a peer blocked on it then fails with "rank D is gone" and
    aborts, saying in its abort that it lost D (``cause``), and that abort
    can reach fmpirun first. A rank that calls ``sys.exit(3)`` finalizes on
    its way out, and a peer blocked on it fails with "rank D has finalized".
    When D's process ended abnormally without fmpirun stopping it (and D did
    not abort; a lost D did not finalize either), D's exit is the cause.
    A failure that is itself a consequence of the job's abort (a rank's abort
    over "job aborted", or that rank's exit) yields to a rank that died on its
    own, whichever fmpirun saw first.
    """
    consequences = [a for a in job.state.aborts if a.rank is not None and (a.cause or {}).get("aborted")]
    if failed_rank in {a.rank for a in consequences} or any(failure.message == str(a) for a in consequences):
        for rank, code in exited.items():  # (in the order they exited)
            if code != 0 and rank not in signalled and all(a.rank != rank for a in consequences):
                return Outcome(_exit_status(code), _describe_exit(rank, code))
        return failure
    abort = job.state.rank_abort()
    if abort is None or failure.message != str(abort):
        return failure
    cause = abort.cause or {}
    dead = cause.get("lost", cause.get("finalized"))
    if dead is None:
        return failure
    code = exited.get(dead)
    if code is None or code == 0 or any(a.rank == dead for a in job.state.aborts):
        return failure
    if "lost" in cause and dead in job.state.finished:
        return failure
    if dead in signalled:
        return failure  # (stopped by us: its status says nothing)
    if code > 0 and code == abort.exit_code:
        return failure  # (it may have exited on the abort itself)
    return Outcome(_exit_status(code), _describe_exit(dead, code))


def _exit_status(code: int) -> int:
    return 128 - code if code < 0 else code


def _describe_exit(rank: int, code: int) -> str:
    if code < 0:
        return f"rank {rank} was killed by signal {signal.Signals(-code).name}"
    return f"rank {rank} exited with status {code}"


def _terminate(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    _kill(procs)


def _kill(procs: list[subprocess.Popen], wait: bool = True) -> None:
    for p in procs:
        _signal_group(p, signal.SIGKILL)
    for p in procs if wait else ():
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            pass


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
