"""The Lambda function's entry point: one invocation is one rank.

``handler(event, context)``:

1. validates the event (``RankEvent.from_event``); a malformed event ends
   the invocation with one clean function error, ``InvalidRankEvent``;
2. logs with aws-lambda-powertools (job id and rank on every line);
3. invokes its subtree of the invocation tree, if it heads one, and starts the invocation's
   other ranks as processes (``siblings``: --ranks-per-function), reaped before it returns;
4. joins the job through the same bootstrap every rank uses;
5. runs the program as ``__main__`` with ``sys.argv`` set, its stdout and
   stderr forwarded to the launcher through the relay as they are written;
6. finalizes (or, if the program raised, aborts the job: the traceback has
   already reached the launcher) and returns a summary: status, exit status,
   timings, bytes moved.

A warm sandbox serves the next invocation in the same process, so nothing of
this one may leak into it: the program gets a fresh ``__main__``, its modules
are dropped from ``sys.modules``, ``sys.argv``/``sys.path``/cwd/environment
are restored, and fmpi's MPI state is reset.

A watchdog aborts the job shortly before the function's timeout would kill
this rank, with a reason that says so, so the launcher need not guess.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import runpy
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from .. import set_remaining_time_source
from ..api.exceptions import cause_of
from ..rank import join as bootstrap
from ..rendezvous.relay_connection import RelayError
from ..util import usage
from ..wire.relay_protocol import Kind, abort_body
from .event import (
    CODE_DIR,
    EVENT_VERSION,
    STATUS_STREAM,
    EventError,
    Fanout,
    RankEvent,
)
from .logger import get_logger as _get_logger
from .output import ForwardedOutput
from .ping import is_ping, pong
from .process_state import ProgramState, RankEnvironment
from .siblings import NODE_VARIABLE, Siblings
from .throttling import invoke_with_backoff

HANDLER = "fmpi.lambda_runtime.handler.handler"
BUNDLE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the fmpi package (the task root)
WATCHDOG_MARGIN = 1.0  # seconds before the function timeout at which the rank aborts the job
FANOUT_WORKERS = 8
# In the function's log line of a rank that could not join: fmpirun looks for it (with the job id) in CloudWatch.
JOIN_FAILED = "fmpi_join_failed"
# In the function's log line of a spare rank that found the world complete: fmpirun reads its request id from it.
NOT_NEEDED = "fmpi_spare_not_needed"

#: A job stopped by a rank's function timeout ends with this status, as timeout(1) does (fmpirun --max-runtime
#: then continues from the newest complete checkpoint, if the launch made one).
FUNCTION_TIMEOUT_EXIT = 124


class InvalidRankEvent(Exception):
    """The invocation's event is not a valid fmpi rank event (this is the function error's type)."""


def handler(event: Any, context: Any) -> dict[str, Any]:
    log = _get_logger()
    if is_ping(event) and event.get("fmpi") == EVENT_VERSION:
        return pong(event)
    try:
        request = RankEvent.from_event(event)
        script = request.program.script
        if script is not None and not (BUNDLE_ROOT / CODE_DIR / script).is_file():
            raise EventError(f"program script {script!r} is not in the deployed code (redeploy with fmpirun)")
    except EventError as exc:
        log.error(f"invalid rank event: {exc}")
        raise InvalidRankEvent(str(exc)) from None
    if not getattr(context, "fmpi_sibling", False):  # (a sibling keeps its head's: one function, one node)
        node = {NODE_VARIABLE: f"{request.spec.job}/{request.spec.incarnation}",
                **({"FMPI_RANKS_PER_NODE": str(request.per_function)} if request.per_function > 1 else {})}
        request = dataclasses.replace(request, env={**request.env, **node})
    keys = {
        "job": request.spec.job,
        "rank": request.spec.rank,
        "incarnation": request.spec.incarnation,
        "request_id": getattr(context, "aws_request_id", None),
    }
    log.append_keys(**keys)
    try:
        with RankEnvironment(request):
            return _Rank(request, context, log).run()
    finally:
        log.remove_keys(list(keys))


# --------------------------------------------------------------------------- one rank


class _Rank:
    def __init__(self, request: RankEvent, context: Any, log: Any) -> None:
        self.request = request
        self.context = context
        self.log = log
        self.started = time.time()
        self.rank = request.spec.rank
        self.timings: dict[str, float] = {}
        self.children: dict[str, Any] = {}
        self.session: bootstrap.RankSession | None = None  # (for the siblings' crash reports)
        # The time this invocation has in all: about the function's timeout.
        self.limit = context.get_remaining_time_in_millis() / 1000.0 if context is not None else math.inf

    def summary(self, status: str, **extra: Any) -> dict[str, Any]:
        self.timings["total"] = round(time.time() - self.started, 6)
        return {
            "job": self.request.spec.job,
            "rank": self.rank,
            "size": self.request.spec.size,
            "status": status,
            "timings": self.timings,
            **({"fanout": self.children} if self.children else {}),
            **extra,
        }

    def run(self) -> dict[str, Any]:
        if len(self.request.local_ranks) == 1:
            return self._run()
        siblings, result = Siblings(self.request, self.context, self._abort_for_sibling, BUNDLE_ROOT).start(), {}
        try:
            result = self._run()
            return result
        finally:  # (also when this rank failed: no sibling outlives the invocation)
            result["siblings"] = {str(rank): code for rank, code in siblings.end().items()}
            self.log.info("siblings ended", extra={"siblings": result["siblings"]})

    def _abort_for_sibling(self, reason: str) -> None:
        self.log.error(reason)
        if self.session is not None:
            _quiet(self.session.send_to_relay, Kind.ABORT, abort_body(1, reason))

    def _run(self) -> dict[str, Any]:
        request = self.request
        self.log.info("rank invoked")
        usage.reset()  # (a warm sandbox: the previous invocation's checkpoint requests are not this one's)
        fanout_thread = None
        if request.fanout is not None:
            fanout_thread = threading.Thread(target=self._invoke_subtree, args=(request.fanout,), name="fmpi-fanout")
            fanout_thread.start()
        remaining = request.deadline - time.time()
        if remaining <= 0:
            self.log.warning(f"invoked {-remaining:.1f} s after the job's deadline for the world to fill: not joining")
            self._join_thread(fanout_thread)
            return self.summary("expired", exit_status=None)
        spec = dataclasses.replace(request.spec, fill_timeout=max(0.1, remaining))
        try:
            session = self._join(spec)
        except RelayError as exc:
            self._join_thread(fanout_thread)
            if exc.code in ("duplicate", "closed") and self.rank == -1:
                # A spare that came too late: the world is complete without it. One line fmpirun finds (with the
                # job id and this request id) to report what this invocation was billed.
                self.log.info(f"{NOT_NEEDED}: a spare of job {request.spec.job} was not needed "
                              f"(request {getattr(self.context, 'aws_request_id', None)}): {exc}")
                return self.summary("not_needed", exit_status=None, message=str(exc))
            if exc.code == "duplicate":
                self.log.warning(f"duplicate invocation refused at rendezvous: {exc}")
                return self.summary("duplicate", exit_status=None, message=str(exc))
            # One line fmpirun finds in CloudWatch (JOIN_FAILED and the job id): it ends the job at once with the cause.
            self.log.error(f"{JOIN_FAILED}: rank {self.rank} of job {request.spec.job} could not join: {exc}")
            return self.summary("not_joined", exit_status=None, message=str(exc), code=exc.code)
        self.timings["join"] = round(time.time() - self.started, 6)
        self.rank = session.rank  # (a spare learns its slot here)
        self.session = session
        self._join_thread(fanout_thread)
        self.log.info("joined the job", extra={"world_size": session.size})
        with ProgramState(request, BUNDLE_ROOT / CODE_DIR), _RemainingTime(self.context):
            try:
                return self._run_joined(session)
            except BaseException as exc:
                _end_session(session, 1, abort_reason=f"rank {self.rank}: the fmpi handler failed: {exc!r}")
                raise

    # ------------------------------------------------------------ program
    def _run_joined(self, session: bootstrap.RankSession) -> dict[str, Any]:
        def send(stream: str, data: str) -> None:
            session.send_to_relay(Kind.OUTPUT, {"stream": stream, "data": data})

        _initialize_mpi(session)
        status: dict[str, Any] = {"linked": 1, **self._invocation()}
        if self.children:
            status["invoked"] = self.children.get("invoked", 0)
        _quiet(send, STATUS_STREAM, json.dumps(status))
        error: BaseException | None = None
        with ForwardedOutput(send, tee=self.request.log_output) as out:
            watchdog = _Watchdog(self.context, lambda: self._timeout_abort(session, out))
            watchdog.start()
            t_run = time.time()
            try:
                code, error = _run_program(self.request.program)
            finally:
                watchdog.stop()
                self.timings["run"] = round(time.time() - t_run, 6)
                out.flush()
        moved = _bytes_moved(session)
        links = _quiet(session.engine.link_stats) if hasattr(session.engine, "link_stats") else _quiet(session.engine.link_summary)
        # What the job's cost report needs from this rank, sent before the rank finalizes (then the relay forgets it).
        final = {"final": {**self._invocation(), "exit_status": code, "bytes": moved,
                           "timings": {**self.timings, "total": round(time.time() - self.started, 6)},
                           "requests": usage.snapshot()}}
        _quiet(send, STATUS_STREAM, json.dumps(final))
        if error is not None:
            reason = f"uncaught {type(error).__name__} on rank {self.rank}: {error}"
            self.log.error(f"the program raised: {reason}")
            _end_session(session, code, abort_reason=reason, abort_cause=cause_of(error))
        else:
            self.log.info("program finished", extra={"exit_status": code})
            _end_session(session, code)
        return self.summary("finished", exit_status=code, bytes=moved, links=links)

    def _join(self, spec: Any) -> bootstrap.RankSession:
        try:
            return bootstrap.join(spec)
        except RelayError as exc:
            taken_by_another = "already registered" in str(exc) and spec.incarnation not in str(exc)
            if exc.code != "duplicate" or spec.rank == -1 or not taken_by_another:
                raise  # (this very invocation delivered twice: a duplicate, refused as such)
            # A spare (fmpirun --spare) came first and took this slot: any free slot will do, so the world does
            # not wait for a straggler's slot instead. The incarnation stays: a second delivery of this same
            # event is still refused, and once the world is complete this one exits as a spare not needed.
            self.log.info(f"slot {spec.rank} was taken by a spare: joining in any free slot ({exc})")
            self.rank = -1
            return bootstrap.join(dataclasses.replace(spec, rank=-1))

    def _invocation(self) -> dict[str, Any]:
        """Which invocation this is: its request id finds its REPORT line (billed duration) in its log stream."""
        return {"request_id": getattr(self.context, "aws_request_id", None),
                "log_stream": getattr(self.context, "log_stream_name", None)}

    def _timeout_abort(self, session: bootstrap.RankSession, out: ForwardedOutput) -> None:
        limit = self.limit
        reason = f"rank {self.rank} reached the function timeout ({limit:.0f} s) and was stopped"
        print(
            f"fmpi: rank {self.rank}: the function timeout ({limit:.0f} s; set with fmpirun --timeout, "
            "at most 900 s on Lambda) is about to end this invocation; aborting the job",
            file=sys.stderr,
        )
        self.log.error(reason)
        out.flush()
        session.abort(FUNCTION_TIMEOUT_EXIT, reason)  # does not return

    # ------------------------------------------------------------ fan-out
    def _invoke_subtree(self, fanout: Fanout) -> None:
        from concurrent.futures import ThreadPoolExecutor

        t0 = time.time()
        children = fanout.children()
        failed: dict[str, str] = {}
        try:
            import boto3
            from botocore.config import Config

            # (throttles are retried by invoke_with_backoff, not by botocore: one bounded layer, as fmpirun's)
            client = boto3.client("lambda", config=Config(max_pool_connections=FANOUT_WORKERS,
                                                          retries={"mode": "standard", "total_max_attempts": 1}))
            target = self.context.invoked_function_arn

            def invoke(sub: Fanout) -> None:
                payload = json.dumps(self.request.for_subtree(sub).to_event())
                try:
                    reply = invoke_with_backoff(lambda: client.invoke(FunctionName=target, InvocationType="Event", Payload=payload))
                except Exception as exc:  # noqa: BLE001 - reported, and the launcher names the missing ranks
                    failed[f"{sub.lo}-{sub.hi - 1}"] = str(exc)
                    return
                # (a rank of it that never joins is found by this line: fmpirun names this invocation's log)
                self.log.info(f"invoked ranks {sub.lo}-{sub.hi - 1}: request id "
                              f"{reply.get('ResponseMetadata', {}).get('RequestId')}")

            with ThreadPoolExecutor(min(FANOUT_WORKERS, len(children)) or 1) as pool:
                list(pool.map(invoke, children))
        except Exception as exc:  # noqa: BLE001 - e.g. no boto3: every child is missing
            failed = {f"{c.lo}-{c.hi - 1}": f"{type(exc).__name__}: {exc}" for c in children}
        self.children = {"invoked": len(children) - len(failed), "seconds": round(time.time() - t0, 6)}
        if failed:
            self.children["failed"] = failed
            self.log.error(f"could not invoke part of the invocation tree: {failed}")

    @staticmethod
    def _join_thread(thread: threading.Thread | None) -> None:
        if thread is not None:
            thread.join(timeout=60)


def _run_program(program) -> tuple[int, BaseException | None]:
    """Run the program as __main__; returns (exit status, the exception it raised or None)."""
    try:
        if program.script is not None:
            runpy.run_path(str(BUNDLE_ROOT / CODE_DIR / program.script), run_name="__main__")
        else:
            runpy.run_module(program.module, run_name="__main__", alter_sys=True)
        return 0, None
    except SystemExit as exc:
        if exc.code is None:
            return 0, None
        if isinstance(exc.code, int):
            return exc.code, None
        print(exc.code, file=sys.stderr)
        return 1, None
    except BaseException as exc:  # noqa: BLE001 - the program's failure, reported like Python would
        tb = exc.__traceback__
        while tb is not None and _is_ours(tb.tb_frame.f_code.co_filename):
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb)
        return 1, exc


def _is_ours(filename: str) -> bool:
    return filename == __file__ or os.path.basename(filename) == "runpy.py" or filename.startswith("<frozen runpy")


class _Watchdog:
    def __init__(self, context: Any, fire) -> None:
        self._context = context
        self._fire = fire
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fmpi-timeout-watchdog", daemon=True)

    def start(self) -> None:
        if self._context is not None:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        remaining = self._context.get_remaining_time_in_millis() / 1000.0
        margin = min(WATCHDOG_MARGIN, 0.2 * remaining)
        if not self._stop.wait(max(0.0, remaining - margin)):
            self._fire()


class _RemainingTime:
    """``fmpi.remaining_time()`` answers from this invocation's context while it runs (and from nothing after)."""

    def __init__(self, context: Any) -> None:
        self.context = context

    def __enter__(self) -> None:
        if self.context is not None and hasattr(self.context, "get_remaining_time_in_millis"):
            set_remaining_time_source(lambda: self.context.get_remaining_time_in_millis() / 1000.0)

    def __exit__(self, *exc: object) -> None:
        set_remaining_time_source(None)


def _initialize_mpi(session: bootstrap.RankSession) -> None:
    """Make `session` (joined by the handler, so it could handle a refused join) this process's MPI world."""
    from ..api import runtime

    runtime.initialize(session)


def _end_session(
    session: bootstrap.RankSession, code: int, abort_reason: str | None = None, abort_cause: dict | None = None
) -> None:
    """Finalize this rank (unless the program did); with `abort_reason`, abort the job first (`abort_cause`: see ``protocol.abort_cause``)."""
    from ..api import runtime

    if not runtime.take_over_finalize():
        return
    if abort_reason is not None:
        # Stop the progress thread first: the relay echoes the abort to every
        # rank, and the bootstrap answers an abort by ending the process.
        session.stop_for_abort(abort_reason)
        _quiet(session.send_to_relay, Kind.ABORT, abort_body(code, abort_reason, abort_cause))
    session.finalize(code)


def _bytes_moved(session: bootstrap.RankSession) -> dict[str, int]:
    return dict(session.engine.traffic())  # links and the relay connection


def _quiet(fn, *args):
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - reporting must never fail a rank
        return None
