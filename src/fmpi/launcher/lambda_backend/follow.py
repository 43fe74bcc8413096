"""Follow a Lambda job from the invocations to its end, and say why it ended.

``Watcher`` turns the job's events (and the ranks' status reports, and the
join failures read from the function's log) into counts and wakes the
supervisor; ``supervise`` decides, at every change, whether the job is done
or failed, and with what message: a rank's abort or exit status, a rank that
could not join, a lost rank (crashed, timed out, or mute), a world that never
filled. What the job cost is ``cost_report``'s to say.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import threading
import time
from dataclasses import dataclass

from ...lambda_runtime.event import STATUS_STREAM, RankEvent
from ...lambda_runtime.fanout import block_of
from ...util.ranges import ranks_phrase
from ..job import Job, JobState
from .deploy import MAX_TIMEOUT, FunctionConfig
from .progress import Display, Printer

GRACE = 10.0  # seconds past the function timeout before the launcher gives a rank up


@dataclass
class Outcome:
    code: int
    message: str | None = None
    unfilled: bool = False  # the world did not fill in time (fmpirun then names the invocations that never joined)


class Watcher:
    """Turns the job's events into progress, and wakes the supervisor on every change."""

    def __init__(self, size: int, display: Display) -> None:
        self.size = size
        self.display = display
        self.cond = threading.Condition()
        self.left: set[int] = set()
        self.started = time.monotonic()
        self.durations: dict[int, float] = {}
        self.invoked_count = 0
        self.join_failure: tuple[int, str] | None = None
        # rank -> what its invocation told (request id, log stream; at its end timings, bytes, checkpoint requests)
        self.invocations: dict[int, dict] = {}
        # incarnation -> what fmpirun invoked (rank, the block it heads, spare or not) and Lambda's request id
        self.requests: dict[str, dict] = {}
        self.joined_incarnations: set[str] = set()
        self._linked: set[int] = set()

    def changed(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def invoked(self, count: int) -> None:
        with self.cond:
            self.invoked_count += count
            self.display.update(invoked=self.invoked_count)

    def accepted(self, event: RankEvent, request_id: str | None) -> None:
        """Lambda accepted the invocation of `event` under `request_id`."""
        spec, block = event.spec, block_of(event)
        with self.cond:
            self.requests[spec.incarnation] = {"rank": spec.rank, "last": block[-1], "request_id": request_id}
        self.invoked(1)

    def could_not_join(self, rank: int, why: str) -> None:
        with self.cond:
            if self.join_failure is None:
                self.join_failure = (rank, why)
            self.cond.notify_all()

    def event(self, kind: str, body: dict) -> None:
        if kind == "joined":
            self.left.discard(body["rank"])
            if isinstance(body.get("incarnation"), str):
                with self.cond:
                    self.joined_incarnations.add(body["incarnation"])
            self.display.update(joined=body.get("joined", 0))
        elif kind == "left":
            self.left.add(body["rank"])
            self.display.update(joined=body.get("joined", 0))
        elif kind == "finished":
            self.durations[body["rank"]] = time.monotonic() - self.started
        self.changed()

    def output(self, printer: Printer):
        def on_output(rank: int, stream: str, data: str) -> None:
            if stream != STATUS_STREAM:
                printer.write(rank, stream, data)
                return
            try:
                status = json.loads(data)
            except ValueError:
                return
            with self.cond:
                if status.get("linked"):
                    self._linked.add(rank)
                if isinstance(status.get("request_id"), str):
                    self.invocations.setdefault(rank, {}).update(request_id=status["request_id"],
                                                                 log_stream=status.get("log_stream"))
                if isinstance(status.get("final"), dict):
                    self.invocations.setdefault(rank, {}).update(status["final"])
                self.invoked_count += int(status.get("invoked", 0))
                self.display.update(invoked=self.invoked_count, linked=len(self._linked))

        return on_output


def supervise(job: Job, watcher: Watcher, cfg: FunctionConfig, size: int, fill_timeout: float, t_invoke: float) -> Outcome:
    """Wait for the job's end (or its failure); abort the other ranks when one fails."""
    fill_deadline = t_invoke + fill_timeout + GRACE
    while True:
        with watcher.cond:
            state = snapshot(job)
            outcome = _verdict(job, state, watcher, cfg, size, t_invoke)
            if outcome is not None:
                return outcome
            now = time.monotonic()
            deadline = fill_deadline if state.world_seconds is None else t_invoke + cfg.timeout + GRACE
            if now >= deadline:
                return _give_up(job, state, cfg, size)
            watcher.cond.wait(min(1.0, deadline - now))


def _verdict(job: Job, state: JobState, watcher: Watcher, cfg: FunctionConfig, size: int, t_invoke: float) -> Outcome | None:
    if state.failure is not None:
        message = str(state.failure)
        if state.failure.code == "fill_timeout":
            message += (
                ". A rank that never starts was throttled, failed to start, or was dropped by Lambda; "
                f"see the function's logs: aws logs tail /aws/lambda/{cfg.name} --since 10m"
            )
        return Outcome(1, message, unfilled=state.failure.code == "fill_timeout")
    aborted = state.rank_abort()
    if aborted is not None:
        return Outcome(aborted.exit_code or 1, str(aborted))
    if watcher.join_failure is not None and state.world_seconds is None:
        rank, why = watcher.join_failure
        message = f"rank {rank} could not join the job: {why} (from the function's log /aws/lambda/{cfg.name})"
        job.abort(1, message)
        return Outcome(1, message)
    bad = {r: c for r, c in state.finished.items() if c != 0}
    if bad:
        rank = min(bad)
        job.abort(bad[rank], f"rank {rank} exited with status {bad[rank]}")
        return Outcome(bad[rank], f"rank {rank} exited with status {bad[rank]}")
    if state.lost:
        rank = min(state.lost)
        message = _lost_message(rank, cfg, time.monotonic() - t_invoke, state.silent.get(rank))
        job.abort(1, message)
        return Outcome(1, message)
    if watcher.left and state.world_seconds is None:
        rank = min(watcher.left)
        message = (
            f"rank {rank} ended before the world was complete (its function crashed or was stopped while "
            f"waiting); see aws logs tail /aws/lambda/{cfg.name}"
        )
        job.abort(1, message)
        return Outcome(1, message)
    if len(state.finished) == size:
        return Outcome(0)
    if state.abort is not None:  # an abort by the launcher side (e.g. another fmpirun) ends it too
        return Outcome(state.abort.exit_code or 1, str(state.abort))
    return None


def _lost_message(rank: int, cfg: FunctionConfig, elapsed: float, silent: float | None) -> str:
    if elapsed >= cfg.timeout - 1.5:
        return (
            f"rank {rank} was stopped by the function timeout ({cfg.timeout} s, set with --timeout; "
            f"Lambda allows at most {MAX_TIMEOUT} s)"
        )
    if silent is not None:  # the relay dropped it for silence: alive, maybe, but mute
        return (
            f"rank {rank} stopped responding (no heartbeat for {silent:g} s): it is stuck in a call that holds "
            f"the GIL, or its function froze; see aws logs tail /aws/lambda/{cfg.name}"
        )
    return (
        f"rank {rank} ended without finalizing after {elapsed:.1f} s: its function crashed, exited early, or ran "
        f"out of memory (--memory {cfg.memory} MB); see aws logs tail /aws/lambda/{cfg.name}"
    )


def _give_up(job: Job, state: JobState, cfg: FunctionConfig, size: int) -> Outcome:
    if state.world_seconds is None:
        missing = sorted(set(range(size)) - state.joined)
        message = f"the world did not fill: {ranks_phrase(missing)} never joined"
        job.abort(1, message)
        return Outcome(1, message, unfilled=True)
    missing = sorted(set(range(size)) - set(state.finished))
    message = (
        f"{ranks_phrase(missing)} did not finish within the function timeout ({cfg.timeout} s): "
        f"the platform stopped {'it' if len(missing) == 1 else 'them'}"
    )
    job.abort(1, message)
    return Outcome(1, message)


def snapshot(job: Job) -> JobState:
    """A copy of the job's state, taken under the job's lock (its event thread keeps changing it)."""
    box: list[JobState] = []

    def take(state: JobState) -> bool:
        snap = copy.copy(state)
        for f in dataclasses.fields(state):
            value = getattr(state, f.name)
            if isinstance(value, (set, dict, list)):
                setattr(snap, f.name, type(value)(value))
        box.append(snap)
        return True

    job.wait(take, 0)
    return box[0]
