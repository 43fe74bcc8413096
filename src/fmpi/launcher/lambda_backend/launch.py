"""``fmpirun --backend lambda|localstack``: deploy, create the job, fan out, follow it to the end.

Order matters: everything that can fail without costing anything (the
program, the relay address, credentials and region, the package, the
deployment, the concurrency headroom) is checked before the job exists at
the relay and before a single rank is invoked; the job's fill timeout then
starts when the ranks are invoked, not while a zip uploads.

Whatever ends the job (a rank's failure, a rank that never starts, a lost
rank, the deadline, Ctrl-C) is reported with its cause, the remaining
ranks are aborted through the relay (no rank keeps billing while it waits),
and the exit status is non-zero.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ...lambda_runtime.event import STATUS_STREAM, Program, RankEvent
from ...lambda_runtime.fanout import (
    WORKERS,
    choose_arity,
    heads,
    invoke_all,
)
from ...rank.spec import check_relay_url, display_url
from ...relay_server.server import RelayThread
from ...rendezvous.relay_connection import RelayError
from ...util.ranges import ranks_phrase
from ..job import Job, JobState, log
from ..relays import host_objects
from .aws import LambdaError, Target, connect
from .deploy import (
    MAX_EVENT_AGE,
    MAX_TIMEOUT,
    MIN_EVENT_AGE,
    FunctionConfig,
    check_concurrency,
    deploy,
    verify,
)
from .packaging import PackagingError, build_bundle, lambda_architecture, lambda_runtime
from .s3code import CodeSource

GRACE = 10.0  # seconds past the function timeout before the launcher gives a rank up
LOCALSTACK_UPDATE_SETTLE = 5.0  # seconds: see _Launch.run
PRICE_PER_GB_SECOND = {"x86_64": 0.0000166667, "arm64": 0.0000133334}  # us-east-1, USD
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")  # S3's rules, roughly


class UsageError(Exception):
    """Bad options for the Lambda backends (fmpirun exits with status 2)."""


@dataclass
class Outcome:
    code: int
    message: str | None = None


def run(args: argparse.Namespace) -> int:
    """Run one job on Lambda; returns fmpirun's exit status."""
    try:
        return _Launch(args).run()
    except UsageError as exc:
        print(f"fmpirun: error: {exc}", file=sys.stderr)
        return 2
    except (LambdaError, PackagingError, RelayError, ValueError) as exc:
        print(f"fmpirun: error: {exc}", file=sys.stderr)
        return 1


def resolve_program(command: list[str], code: str | None) -> tuple[Program, Path]:
    """The program a rank runs, and the directory deployed with it."""
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no program given (e.g. fmpirun --backend lambda -n 4 python app.py)")
    rest = list(command)
    if not rest[0].endswith(".py"):
        if not Path(rest[0]).name.startswith("python"):
            raise UsageError(f"the Lambda backends run Python programs: python SCRIPT.py ARGS or python -m MODULE ARGS (not {rest[0]!r})")
        rest.pop(0)
        while rest and rest[0] in ("-u", "-B", "-O", "-OO", "-s", "-E"):
            rest.pop(0)
        if not rest:
            raise UsageError("no script given after python")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise UsageError("python -m needs a module name")
        code_dir = Path(code or ".").resolve()
        return Program(module=rest[1], args=tuple(rest[2:])), _check_dir(code_dir)
    if rest[0].startswith("-"):
        raise UsageError(f"python option {rest[0]} is not supported by the Lambda backends")
    script = Path(rest[0])
    if not script.is_file():
        raise UsageError(f"script not found: {script}")
    script = script.resolve()
    code_dir = _check_dir(Path(code).resolve() if code else script.parent)
    try:
        relative = script.relative_to(code_dir)
    except ValueError:
        raise UsageError(f"script {script} is not inside the code directory {code_dir} (--code)") from None
    return Program(script=relative.as_posix(), args=tuple(rest[1:])), code_dir


def _check_dir(path: Path) -> Path:
    if not path.is_dir():
        raise UsageError(f"code directory not found: {path}")
    return path


class _Launch:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.verbose = args.verbose
        self.size = args.n

    def note(self, message: str) -> None:
        if self.verbose:
            log(message)

    def run(self) -> int:
        args = self.args
        program, code_dir = resolve_program(args.command, args.code)
        relay_url, relay_listen = self._relay_choice()
        cfg = self._function_config()
        bucket = getattr(args, "s3_bucket", None)
        if bucket is not None and not BUCKET_NAME.match(bucket):
            raise UsageError(f"--s3-bucket {bucket!r} is not a valid S3 bucket name (3-63 lowercase letters, digits, dots, hyphens)")
        target = connect(args.backend, args.region, args.profile, args.endpoint_url)
        self.note(f"{args.backend}: region {target.where}, function {cfg.name}")

        t0 = time.monotonic()
        bundle = build_bundle(code_dir, vendor=not args.no_bundle_deps)
        self.note(
            f"package {'from the cache' if bundle.cached else 'built'}: {bundle.files} files, "
            f"{bundle.zipped_size / 2**20:.1f} MB zipped, {bundle.unzipped_size / 2**20:.1f} MB unzipped "
            f"({time.monotonic() - t0:.1f} s)"
        )
        for warning in bundle.warnings if target.custom_endpoint is None else ():  # about AWS's runtime only
            log(f"warning: {warning}")
        code = CodeSource(target, bundle, bucket, log=self.note)
        lam = target.client("lambda", workers=WORKERS)
        deployment = deploy(target, lam, cfg, bundle, self.note, code)
        self.note(f"function {cfg.name}: {deployment.action} ({deployment.seconds:.1f} s)")
        if deployment.action.startswith("updated") and args.backend == "localstack":
            # LocalStack (4.13) keeps the old version's event poller alive for a moment after an
            # update, and Event invocations it picks up then are lost: let it stop first.
            time.sleep(LOCALSTACK_UPDATE_SETTLE)
        if deployment.action != "unchanged":
            answer = verify(lam, cfg.name, bundled=not args.no_bundle_deps)
            self.note(f"function {cfg.name} answers: fmpi {answer.get('fmpi')}, Python {answer.get('python')}, numpy {answer.get('numpy')}")
        check_concurrency(lam, target, cfg.name, self.size, lambda m: log(f"warning: {m}"))

        relay = None
        if relay_url is None:
            host, port = relay_listen
            try:
                relay = RelayThread(host, port)
            except OSError as exc:
                raise UsageError(f"cannot start the relay on {host}:{port}: {exc}") from None
            relay_url = "tcp://{}:{}".format(*relay.address)
        try:
            return self._run_job(target, lam, cfg, program, relay_url, embedded_relay=relay is not None)
        finally:
            if relay is not None:
                relay.stop()

    # -------------------------------------------------------------- options
    def _relay_choice(self) -> tuple[str | None, tuple[str, int] | None]:
        args = self.args
        if args.relay:
            check_relay_url(args.relay)  # tcp:// (fmpi-relay) or redis:// (the event carries it as is)
            return args.relay, None
        if args.relay_listen is None:
            raise UsageError(
                "the Lambda backends need a relay the functions can reach: run fmpi-relay on a host with a public "
                "address and pass --relay tcp://HOST:PORT, or let fmpirun run one there with --relay-listen HOST:PORT "
                "(see docs/lambda.md)"
            )
        host, _, port = args.relay_listen.rpartition(":")
        if host in ("", "0.0.0.0", "::", "[::]"):
            raise UsageError("--relay-listen needs the address the functions connect to (not a wildcard address)")
        try:
            return None, (host.strip("[]"), int(port))
        except ValueError:
            raise UsageError(f"--relay-listen needs HOST:PORT, not {args.relay_listen!r}") from None

    def _function_config(self) -> FunctionConfig:
        args = self.args
        if not 1 <= args.timeout <= MAX_TIMEOUT:
            raise UsageError(f"--timeout must be 1 to {MAX_TIMEOUT} seconds (Lambda's limit), not {args.timeout}")
        if not 128 <= args.memory <= 10240:
            raise UsageError(f"--memory must be 128 to 10240 MB, not {args.memory}")
        if args.fill_timeout >= args.timeout:
            raise UsageError(
                f"--fill-timeout ({args.fill_timeout:g} s) must be shorter than the function --timeout ({args.timeout} s): "
                "ranks wait for the world inside their time limit"
            )
        if args.fanout_arity is not None and args.fanout_arity < 0:
            raise UsageError("--fanout-arity must be 0 (no tree) or more")
        layers = [arn.strip() for value in args.layers for arn in value.split(",") if arn.strip()]
        return FunctionConfig(
            name=args.function_name,
            memory=args.memory,
            timeout=args.timeout,
            runtime=lambda_runtime(),
            architecture=lambda_architecture(),
            role=args.role,
            layers=layers,
            max_event_age=int(min(MAX_EVENT_AGE, max(MIN_EVENT_AGE, args.fill_timeout))),
        )

    # ------------------------------------------------------------------ job
    def _run_job(
        self, target: Target, lam, cfg: FunctionConfig, program: Program, relay_url: str, embedded_relay: bool = False
    ) -> int:
        args = self.args
        progress = _Progress(self.size, self.verbose)
        printer = _Printer(args.tag_output, progress)
        watcher = _Watcher(self.size, progress)
        job = Job(
            relay_url, self.size, args.fill_timeout, on_output=watcher.output(printer), on_event=watcher.event,
            channel=getattr(args, "channel", None) or "", embedded_relay=embedded_relay,
        )
        job.on_change = watcher.changed
        self.note(f"job {job.id}: {self.size} ranks, relay {display_url(relay_url)}")
        objects = None
        try:
            # Several relays (tcp://a:7000,b:7000): the others host the job's shared objects while it runs.
            objects = host_objects(job, relay_url)
            if objects is not None:
                self.note(f"job {job.id}: shared objects hosted on {len(objects.conns) + 1} relays")
            base = RankEvent(job.spec(0), program, time.time() + args.fill_timeout)
            arity = choose_arity(self.size, args.fanout_arity)
            events = heads(base, self.size, arity)
            t_invoke = time.monotonic()
            failed = invoke_all(lam, cfg.name, events, lambda _event: watcher.invoked(1))
            if arity:
                self.note(f"invoked {len(events) - len(failed)} heads of an invocation tree of arity {arity}")
            if failed:
                ranks = sorted(failed)
                more = f" (and {len(ranks) - 1} more not started)" if len(ranks) > 1 else ""
                outcome = Outcome(1, failed[ranks[0]] + more)
                job.abort(1, "the launcher could not invoke every rank")
            else:
                outcome = self._supervise(job, watcher, cfg, t_invoke)
        except KeyboardInterrupt:
            job.abort(130, "interrupted by the launcher")
            outcome = Outcome(130, "interrupted; all ranks stopped")
        finally:
            progress.done()
            if objects is not None:
                objects.end()
            job.end()
        printer.flush()
        if outcome.message:
            log(outcome.message)
        links = getattr(job.state, "links", None)  # direct / punched / relayed, as the local backend reports
        summary = links.summary() if links is not None else None
        if summary:
            log(summary)
        if self.verbose and outcome.code == 0:
            self._report_cost(cfg, watcher)
        return outcome.code

    def _supervise(self, job: Job, watcher: _Watcher, cfg: FunctionConfig, t_invoke: float) -> Outcome:
        fill_deadline = t_invoke + self.args.fill_timeout + GRACE
        while True:
            with watcher.cond:
                state = _snapshot(job)
                outcome = self._verdict(job, state, watcher, cfg, t_invoke)
                if outcome is not None:
                    return outcome
                now = time.monotonic()
                if state.world_seconds is None:
                    deadline = fill_deadline
                else:
                    deadline = t_invoke + cfg.timeout + GRACE
                if now >= deadline:
                    return self._give_up(job, state, cfg)
                watcher.cond.wait(min(1.0, deadline - now))

    def _verdict(self, job: Job, state: JobState, watcher: _Watcher, cfg: FunctionConfig, t_invoke: float) -> Outcome | None:
        if state.failure is not None:
            message = str(state.failure)
            if state.failure.code == "fill_timeout":
                message += (
                    ". A rank that never starts was throttled, failed to start, or was dropped by Lambda; "
                    f"see the function's logs: aws logs tail /aws/lambda/{cfg.name} --since 10m"
                )
            return Outcome(1, message)
        aborted = state.rank_abort()
        if aborted is not None:
            return Outcome(aborted.exit_code or 1, str(aborted))
        bad = {r: c for r, c in state.finished.items() if c != 0}
        if bad:
            rank = min(bad)
            job.abort(bad[rank], f"rank {rank} exited with status {bad[rank]}")
            return Outcome(bad[rank], f"rank {rank} exited with status {bad[rank]}")
        if state.lost:
            rank = min(state.lost)
            message = self._lost_message(rank, cfg, time.monotonic() - t_invoke, state.silent.get(rank))
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
        if len(state.finished) == self.size:
            return Outcome(0)
        if state.abort is not None:  # an abort by the launcher side (e.g. another fmpirun) ends it too
            return Outcome(state.abort.exit_code or 1, str(state.abort))
        return None

    def _lost_message(self, rank: int, cfg: FunctionConfig, elapsed: float, silent: float | None) -> str:
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

    def _give_up(self, job: Job, state: JobState, cfg: FunctionConfig) -> Outcome:
        if state.world_seconds is None:
            missing = sorted(set(range(self.size)) - state.joined)
            message = f"the world did not fill: {ranks_phrase(missing)} never joined"
        else:
            missing = sorted(set(range(self.size)) - set(state.finished))
            message = (
                f"{ranks_phrase(missing)} did not finish within the function timeout ({cfg.timeout} s): "
                f"the platform stopped {'it' if len(missing) == 1 else 'them'}"
            )
        job.abort(1, message)
        return Outcome(1, message)

    def _report_cost(self, cfg: FunctionConfig, watcher: _Watcher) -> None:
        seconds = sum(watcher.durations.values())
        gb_seconds = cfg.memory / 1024 * seconds
        price = PRICE_PER_GB_SECOND.get(cfg.architecture, PRICE_PER_GB_SECOND["x86_64"])
        log(
            f"done: {self.size} ranks, about {seconds:.1f} rank-seconds x {cfg.memory / 1024:.2f} GB = "
            f"{gb_seconds:.1f} GB-s (about ${gb_seconds * price:.5f} of Lambda compute)"
        )


# ----------------------------------------------------------------- following


def _snapshot(job: Job) -> JobState:
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


class _Watcher:
    """Turns the job's events into progress, and wakes the supervisor on every change."""

    def __init__(self, size: int, progress: _Progress) -> None:
        self.size = size
        self.progress = progress
        self.cond = threading.Condition()
        self.left: set[int] = set()
        self.started = time.monotonic()
        self.durations: dict[int, float] = {}
        self._invoked = 0
        self._linked: set[int] = set()

    def changed(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def invoked(self, count: int) -> None:
        with self.cond:
            self._invoked += count
            self.progress.update(invoked=self._invoked)

    def event(self, kind: str, body: dict) -> None:
        if kind == "joined":
            self.left.discard(body["rank"])
            self.progress.update(joined=body.get("joined", 0))
        elif kind == "left":
            self.left.add(body["rank"])
            self.progress.update(joined=body.get("joined", 0))
        elif kind == "finished":
            self.durations[body["rank"]] = time.monotonic() - self.started
        self.changed()

    def output(self, printer: _Printer):
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
                self._invoked += int(status.get("invoked", 0))
                self.progress.update(invoked=self._invoked, linked=len(self._linked))

        return on_output


class _Printer:
    """Rank output to our stdout/stderr, a complete line at a time (as the local backend prints it).

    Ranks send a partial line when they pause mid-line; it is held until its
    newline arrives (or the job ends), so that lines of different ranks never
    interleave. With --tag-output every line starts with "[rank] ".
    """

    def __init__(self, tag_output: bool, progress: _Progress) -> None:
        self.tag = tag_output
        self.progress = progress
        self.lock = threading.Lock()
        self.partial: dict[tuple[int, str], str] = {}

    def write(self, rank: int, stream: str, data: str) -> None:
        with self.lock:
            key = (rank, stream)
            data = self.partial.pop(key, "") + data
            cut = data.rfind("\n") + 1
            if cut < len(data):
                self.partial[key] = data[cut:]
            if cut:
                self._emit(rank, stream, data[:cut])

    def flush(self) -> None:
        with self.lock:
            for (rank, stream), rest in sorted(self.partial.items()):
                self._emit(rank, stream, rest + "\n")
            self.partial.clear()

    def _emit(self, rank: int, stream: str, lines: str) -> None:
        if self.tag:
            lines = "".join(f"[{rank}] {line}" for line in lines.splitlines(keepends=True))
        sink = sys.stderr if stream == "stderr" else sys.stdout
        self.progress.clear()
        sink.write(lines)
        sink.flush()


class _Progress:
    """invoked / joined / linked, on one refreshed line of a terminal, or as log lines with --verbose."""

    def __init__(self, size: int, verbose: bool) -> None:
        self.size = size
        self.verbose = verbose
        self.tty = sys.stderr.isatty()
        self.counts = {"invoked": 0, "joined": 0, "linked": 0}
        self.reported: set[str] = set()
        self.lock = threading.Lock()
        self.shown = False
        self.finished = False

    def update(self, **counts: int) -> None:
        with self.lock:
            self.counts.update(counts)
            if self.finished:
                return
            line = " · ".join(f"{k} {v}/{self.size}" for k, v in self.counts.items())
            if self.tty:
                sys.stderr.write(f"\r\033[Kfmpirun: {line}")
                sys.stderr.flush()
                self.shown = True
                if self.counts["linked"] >= self.size:
                    self._clear()
                    self.finished = True
            elif self.verbose:
                for k, v in self.counts.items():
                    if v >= self.size and k not in self.reported:
                        self.reported.add(k)
                        log(f"{k} {v}/{self.size}")

    def clear(self) -> None:
        with self.lock:
            self._clear()

    def _clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.shown = False

    def done(self) -> None:
        with self.lock:
            self._clear()
            self.finished = True


