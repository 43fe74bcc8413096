"""``fmpirun --backend lambda|localstack``: check, package, deploy, ping, create the job, fan out, follow it to the end.

Order matters: cheap checks first, changes to the account last. The
options, the program, the relay (bound here, or reachable from here), the
credentials, region and account, the role and the concurrency are checked
before anything is built or uploaded; the package (every library checked
against the runtime) before the function is changed; the deployed version
(it imports, and it reaches the relay from inside) before the job exists
at the relay and before a single rank is invoked. The job's fill timeout
then starts when the ranks are invoked, not while a zip uploads.

Whatever ends the job (a rank's failure, a rank that cannot join, a rank
that never starts, a lost rank, the deadline, Ctrl-C) is reported with its
cause, the remaining ranks are aborted through the relay (no rank keeps
billing while it waits), the exit status is non-zero, and the job's cost
is printed, as after a success.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ... import settings
from ...lambda_runtime.event import Program, RankEvent
from ...lambda_runtime.fanout import WORKERS, choose_arity, heads, invoke_all
from ...lambda_runtime.runtimes import runtime_named
from ...lambda_runtime.throttling import Pacer
from ...relay_server.server import RelayThread
from ...rendezvous.relay_connection import RelayError
from ...rendezvous.urls import display_url
from ...util import usage
from ..job import Job, log
from ..relaunch import RESUME_EXIT
from ..relays import host_objects
from .aws import LambdaError, Target, connect
from .deploy import (
    FunctionConfig,
    check_concurrency,
    deploy,
    function_exists,
    resolve_role,
)
from . import cost_report, prices
from .billing import Report, read_reports, unneeded_spares
from .cost_report import LaunchFacts
from .follow import Outcome, Watcher, snapshot, supervise
from .join_failures import JoinFailures
from .listing import describe_bundle
from .missing import describe as never_joined
from .options import (
    RelayPlan,
    UsageError,
    function_config,
    rank_environment,
    ranks_per_function,
    relay_plan,
    resolve_program,
    tls_ca,
)
from .packaging import PackagingError, build_bundle
from .preflight import check_advertised, check_relay_from_here, ping
from .prices import Prices
from .progress import Display, Printer
from .resources import find_created, remove
from .s3code import CodeSource, default_bucket

LOCALSTACK_UPDATE_SETTLE = 5.0  # seconds: see _Launch._deploy
REPORT_WAIT = 15.0  # seconds fmpirun waits at a job's end for CloudWatch to show the invocations' REPORT lines
MAX_EVENT_BYTES = 250_000  # Lambda takes at most 256 KB for an asynchronous invocation's event


def run(args: argparse.Namespace) -> int:
    """Run one job on Lambda (or clean up, or list the package); returns fmpirun's exit status."""
    launch = _Launch(args)
    try:
        return launch.run()
    except UsageError as exc:
        launch.display.close()
        print(f"fmpirun: error: {exc}", file=sys.stderr)
        return 2
    except (LambdaError, PackagingError, RelayError, ValueError) as exc:
        launch.display.close()
        print(f"fmpirun: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        launch.display.close()
        print("fmpirun: interrupted (no rank was started)", file=sys.stderr)
        return 130
    finally:
        launch.display.close()


class _Launch:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.size = args.n or 0
        self.display = Display(self.size, args.verbose, live=False)  # the live one starts with the work
        self.ping_report: Report | None = None
        self.since_ms = int(time.time() * 1000)
        self.scaling = (1000, 10.0)  # (FMPI_LAMBDA_SCALING, read with the prices)
        self.prices: Prices | None = None
        # --max-runtime launches this object once per launch with the same args: the cost report adds them up.
        self.launches: list[dict] = vars(args).setdefault("cost_launches", [])
        self.per_function = self.functions = 1

    def run(self) -> int:
        args = self.args
        if args.cleanup:
            return self._cleanup()
        try:
            settings.current()  # a bad FMPI_* variable is a usage error (status 2), found before anything else
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        program, code_dir = resolve_program(args.command, args.code)
        cfg = function_config(args)
        self.per_function = ranks_per_function(args)
        self.functions = -(-self.size // self.per_function)  # the invocations: ceil(N / K)
        deps = "none" if args.no_bundle_deps else args.deps
        if args.dry_run:
            return self._dry_run(code_dir, cfg, deps)
        plan = relay_plan(args)
        env = rank_environment(args.env)
        self.display = Display(self.size, args.verbose, invocations=self.functions + args.spare)
        target = connect(args.backend, args.region, args.profile, args.endpoint_url)
        self.display.activity("checking the account")
        account = target.account()
        self.display.step(f"{args.backend}: account {account}, region {target.where}, function {cfg.name} "
                          f"({cfg.runtime}, {cfg.architecture}, {cfg.memory} MB)")
        lam = target.client("lambda", workers=WORKERS)
        self.prices = self._prices(target.region)
        relay = self._start_relay(plan) if plan.url is None else None
        try:
            relay_url = plan.url or plan.url_for(relay.address)
            self._cheap_checks(target, lam, cfg, relay_url, embedded=relay is not None)
            ca = tls_ca(relay_url)
            self.display.activity("packaging")
            t0 = time.monotonic()
            bundle = build_bundle(code_dir, deps=deps, runtime=runtime_named(cfg.runtime), architecture=cfg.architecture)
            self.display.step(
                f"package {'from the cache' if bundle.cached else 'built'}: {bundle.files} files, "
                f"{bundle.zipped_size / 2**20:.1f} MB zipped, {bundle.unzipped_size / 2**20:.1f} MB unzipped "
                f"({time.monotonic() - t0:.1f} s)"
            )
            for warning in bundle.warnings:
                self.display.warn(warning)
            version = self._deploy(target, lam, cfg, bundle)
            self.display.activity(f"checking {cfg.name}:{version} from inside Lambda")
            answer, self.ping_report = ping(lam, cfg.name, version, relay_url, ca, bundled=deps != "none")
            self.display.step(
                f"function {cfg.name}:{version} answers: fmpi {answer.get('fmpi')}, Python {answer.get('python')}, "
                f"numpy {answer.get('numpy')}; relay reached in {answer.get('relay_seconds', 0) * 1000:.0f} ms"
                + (f" (the function's public address {answer['observed'][0]})" if answer.get("observed") else "")
            )
            if answer.get("probe") is False:
                self.display.warn("the function cannot reach the relay's NAT probe port (open it too: docs/lambda.md); "
                                  "links to ranks behind symmetric NATs fall back to the relay")
            return self._run_job(target, lam, cfg, version, program, relay_url, env, ca, embedded=relay is not None)
        finally:
            if relay is not None:
                relay.stop()

    # ------------------------------------------------------------ before the job
    def _prices(self, region: str) -> Prices:
        """The prices for the cost report; before anything is deployed, a bad --report, --prices or FMPI_* stops it."""
        try:
            if self.args.report:
                cost_report.check_writable(self.args.report)
            self.scaling = settings.current().lambda_scaling
            return prices.load(region, self.args.prices or settings.current().prices)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    def _start_relay(self, plan: RelayPlan) -> RelayThread:
        host, port = plan.listen
        try:
            relay = RelayThread(host, port, probe_port=plan.probe_port if plan.probe_port is not None else 0)
        except OSError as exc:
            raise UsageError(f"cannot start the relay on {host}:{port}: {exc}") from None
        probe = relay.server.probe_port
        self.display.note(f"relay listening on {host}:{relay.address[1]}" + (f", NAT probe port {probe}" if probe else ""))
        return relay

    def _cheap_checks(self, target: Target, lam, cfg: FunctionConfig, relay_url: str, embedded: bool) -> None:
        self.display.activity("checking the relay, the role and the concurrency")
        if not embedded:
            check_relay_from_here(relay_url)
        check_advertised(relay_url, real_aws=target.custom_endpoint is None)
        if not function_exists(lam, cfg.name):
            if cfg.role is None:
                raise LambdaError(
                    f"function {cfg.name!r} does not exist in {target.where} and no --role was given: "
                    "create an execution role for the ranks (docs/lambda.md) and pass --role ARN_OR_NAME"
                )
            resolve_role(target, cfg.role)
        elif cfg.role is not None:
            resolve_role(target, cfg.role)
        check_concurrency(lam, target, cfg.name, self.functions + self.args.spare, self.display.warn)

    def _deploy(self, target: Target, lam, cfg: FunctionConfig, bundle) -> str:
        self.display.activity(f"deploying {cfg.name}")
        code = CodeSource(target, bundle, self.args.s3_bucket, log=self.display.note)
        deployment = deploy(target, lam, cfg, bundle, self.display.activity, code, warn=self.display.warn)
        self.display.step(f"function {cfg.name}: {deployment.action}, version {deployment.version} "
                          f"({deployment.seconds:.1f} s)")
        if deployment.action.startswith("updated") and self.args.backend == "localstack":
            # LocalStack (4.13) keeps the old version's event poller alive for a moment after an
            # update, and Event invocations it picks up then are lost: let it stop first.
            time.sleep(LOCALSTACK_UPDATE_SETTLE)
        return deployment.version

    def _dry_run(self, code_dir: Path, cfg: FunctionConfig, deps: str) -> int:
        """List the package; no relay, no credentials, no AWS call."""
        bundle = build_bundle(code_dir, deps=deps, runtime=runtime_named(cfg.runtime), architecture=cfg.architecture)
        print(describe_bundle(bundle, cfg.runtime, cfg.architecture))
        for warning in bundle.warnings:
            log(f"warning: {warning}")
        return 0

    def _cleanup(self) -> int:
        args = self.args
        target = connect(args.backend, args.region, args.profile, args.endpoint_url)
        bucket = args.s3_bucket or default_bucket(target.account(), target.region)
        found = find_created(target, bucket)
        if not found:
            log(f"nothing created by fmpirun in {target.where}")
            return 0
        for item in found:
            if args.dry_run:
                log(f"would delete the {item.kind} {item.name}")
            else:
                remove(target, item)
                log(f"deleted the {item.kind} {item.name}")
        return 0

    # ------------------------------------------------------------------ the job
    def _run_job(self, target: Target, lam, cfg: FunctionConfig, version: str, program: Program, relay_url: str,
                 env: dict[str, str], ca: str | None, embedded: bool) -> int:
        args = self.args
        display = self.display
        printer = Printer(args.tag_output, display)
        watcher = Watcher(self.size, display)
        job = Job(
            relay_url, self.size, args.fill_timeout, on_output=watcher.output(printer), on_event=watcher.event,
            channel=getattr(args, "channel", None) or "", embedded_relay=embedded,
        )
        job.on_change = watcher.changed
        spares = f" and {args.spare} spare{'s' if args.spare != 1 else ''}" if args.spare else ""
        per = (f" in {self.functions} invocations of {self.per_function}" if self.per_function > 1 else "")
        display.note(f"job {job.id}: {self.size} ranks{per}{spares}, relay {display_url(relay_url)}")
        objects = joins = None
        try:
            # Several relays (tcp://a:7000,b:7000): the others host the job's shared objects while it runs.
            objects = host_objects(job, relay_url)
            if objects is not None:
                display.note(f"job {job.id}: shared objects hosted on {len(objects.conns) + 1} relays")
            base = RankEvent(job.spec(0), program, time.time() + args.fill_timeout, env=env, tls_ca=ca,
                             log_output=not args.no_log_output, per_function=self.per_function)
            if len(json.dumps(base.to_event())) > MAX_EVENT_BYTES:
                raise UsageError("the rank event is over Lambda's 256 KB limit: pass less with -x/--env")
            arity = choose_arity(self.functions, args.fanout_arity)
            events = heads(base, self.size, arity) + [base.spare() for _ in range(args.spare)]
            display.activity(f"starting {self.size} ranks")
            t_invoke = time.monotonic()
            self.since_ms = int(time.time() * 1000) - 5000  # (REPORT lines from here on; clocks differ a little)
            joins = JoinFailures(target.client("logs"), cfg.name, job.id, watcher.could_not_join, display.warn).start()
            failed = self._invoke(target, f"{cfg.name}:{version}", events, watcher)
            if failed:
                ranks = sorted(failed)
                more = f" (and {len(ranks) - 1} more not started)" if len(ranks) > 1 else ""
                outcome = Outcome(1, failed[ranks[0]] + more)
                job.abort(1, "the launcher could not invoke every rank")
            else:
                display.activity("running")
                outcome = supervise(job, watcher, cfg, self.size, args.fill_timeout, t_invoke)
                if outcome.unfilled and outcome.message:
                    outcome.message += self._never_joined(target, cfg, job, watcher)
        except KeyboardInterrupt:
            job.abort(130, "interrupted by the launcher")
            outcome = Outcome(130, "interrupted; all ranks stopped")
        finally:
            if joins is not None:
                joins.stop()
            display.close()
            if objects is not None:
                objects.end()
            job.end()
        printer.flush()
        if outcome.message and outcome.code != RESUME_EXIT:  # (the ranks said why themselves)
            log(outcome.message)
        links = job.state.links  # (-v) direct / punched / relayed, as the local backend reports
        summary = links.summary() if args.verbose else None
        if summary:
            log(summary)
        self._report_cost(target, cfg, job, watcher, outcome.code, time.monotonic() - t_invoke)
        return outcome.code

    def _invoke(self, target: Target, function: str, events: list[RankEvent], watcher: Watcher) -> dict[int, str]:
        """Invoke the ranks (or the tree's heads) at Lambda's scaling rate, retrying throttled invocations."""
        step, period = self.scaling
        throttled: list[int] = []

        def waiting(seconds: float, count: int) -> None:
            self.display.platform_bound("scaling", f"Lambda scales a function by {step} executions every {period:g} s: "
                                                   f"waiting {seconds:.1f} s before invocation {count}")

        def on_throttled(rank: int) -> None:
            throttled.append(rank)
            self.display.platform_bound("throttled", f"Lambda throttled the invocation of rank {rank} "
                                                     "(TooManyRequestsException); retrying with back-off")

        invoker = target.client("lambda", workers=WORKERS, attempts=1)  # (throttles: invoke_with_backoff's)
        failed = invoke_all(invoker, function, events, watcher.accepted,
                            pacer=Pacer(step, period, on_wait=waiting), on_throttled=on_throttled)
        if throttled:
            self.display.step(f"{len(throttled)} throttled invocation{'s' if len(throttled) != 1 else ''} of "
                              f"{len(set(throttled))} rank{'s' if len(set(throttled)) != 1 else ''} retried")
        return failed

    def _never_joined(self, target: Target, cfg: FunctionConfig, job: Job, watcher: Watcher) -> str:
        """The invocations a world that did not fill waited for, with their request ids and log streams."""
        missing = sorted(set(range(self.size)) - snapshot(job).joined)
        with watcher.cond:
            requests, joined = dict(watcher.requests), set(watcher.joined_incarnations)
        return never_joined(requests, joined, missing, target.client("logs"), cfg.name, self.since_ms, self.display.warn)

    def _report_cost(self, target: Target, cfg: FunctionConfig, job: Job, watcher: Watcher, code: int,
                     seconds: float) -> None:
        """The cost line (and --report): Lambda's REPORT lines of the invocations that said who they are."""
        logs = target.client("logs")
        spares = unneeded_spares(logs, cfg.name, job.id, self.since_ms, self.display.warn) if self.args.spare else []
        request_ids = [i["request_id"] for i in watcher.invocations.values() if i.get("request_id")] + spares
        reports = read_reports(logs, cfg.name, request_ids, self.since_ms, REPORT_WAIT, self.display.warn)
        # (the invocations heard of: the ranks of one function share its request id)
        heard = {i.get("request_id") or f"rank {r}" for r, i in watcher.invocations.items()}
        facts = LaunchFacts(
            job=job.id, size=self.size, exit_status=code, function=cfg.name, memory_mb=cfg.memory,
            architecture=cfg.architecture, seconds=seconds, invoked=max(watcher.invoked_count, len(heard)),
            invocations=watcher.invocations, finished_after=dict(watcher.durations), reports=reports,
            ping=self.ping_report, links=job.state.links, launcher_requests=usage.snapshot(), spares=spares,
        )
        usage.reset()  # (counted once: the next launch counts its own)
        self.launches.append(cost_report.launch_record(facts, self.prices))
        report = cost_report.job_report(self.launches, self.prices)
        log(cost_report.cost_line(report, self.prices))
        if self.args.report:
            try:
                cost_report.write(self.args.report, report)
            except OSError as exc:
                log(f"warning: could not write the cost report {self.args.report}: {exc.strerror or exc}")
