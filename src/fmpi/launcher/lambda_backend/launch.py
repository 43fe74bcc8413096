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

from ...lambda_runtime.event import Program, RankEvent
from ...lambda_runtime.fanout import WORKERS, choose_arity, heads, invoke_all
from ...lambda_runtime.runtimes import runtime_named
from ...relay_server.server import RelayThread
from ...rendezvous.relay_connection import RelayError
from ...rendezvous.urls import display_url
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
from .follow import Outcome, Watcher, cost_line, supervise
from .join_failures import JoinFailures
from .listing import describe_bundle
from .options import (
    RelayPlan,
    UsageError,
    function_config,
    rank_environment,
    relay_plan,
    resolve_program,
    tls_ca,
)
from .packaging import PackagingError, build_bundle
from .preflight import check_advertised, check_relay_from_here, ping
from .progress import Display, Printer
from .resources import find_created, remove
from .s3code import CodeSource, default_bucket

LOCALSTACK_UPDATE_SETTLE = 5.0  # seconds: see _Launch._deploy
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

    def run(self) -> int:
        args = self.args
        if args.cleanup:
            return self._cleanup()
        program, code_dir = resolve_program(args.command, args.code)
        cfg = function_config(args)
        deps = "none" if args.no_bundle_deps else args.deps
        if args.dry_run:
            return self._dry_run(code_dir, cfg, deps)
        plan = relay_plan(args)
        env = rank_environment(args.env)
        self.display = Display(self.size, args.verbose)
        target = connect(args.backend, args.region, args.profile, args.endpoint_url)
        self.display.activity("checking the account")
        account = target.account()
        self.display.step(f"{args.backend}: account {account}, region {target.where}, function {cfg.name} "
                          f"({cfg.runtime}, {cfg.architecture}, {cfg.memory} MB)")
        lam = target.client("lambda", workers=WORKERS)
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
            answer = ping(lam, cfg.name, version, relay_url, ca, bundled=deps != "none")
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
        check_concurrency(lam, target, cfg.name, self.size, self.display.warn)

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
        display.note(f"job {job.id}: {self.size} ranks, relay {display_url(relay_url)}")
        objects = joins = None
        try:
            # Several relays (tcp://a:7000,b:7000): the others host the job's shared objects while it runs.
            objects = host_objects(job, relay_url)
            if objects is not None:
                display.note(f"job {job.id}: shared objects hosted on {len(objects.conns) + 1} relays")
            base = RankEvent(job.spec(0), program, time.time() + args.fill_timeout, env=env, tls_ca=ca,
                             log_output=not args.no_log_output)
            if len(json.dumps(base.to_event())) > MAX_EVENT_BYTES:
                raise UsageError("the rank event is over Lambda's 256 KB limit: pass less with -x/--env")
            arity = choose_arity(self.size, args.fanout_arity)
            events = heads(base, self.size, arity)
            display.activity(f"starting {self.size} ranks")
            t_invoke = time.monotonic()
            joins = JoinFailures(target.client("logs"), cfg.name, job.id, watcher.could_not_join, display.warn).start()
            failed = invoke_all(lam, f"{cfg.name}:{version}", events, lambda _event: watcher.invoked(1))
            if failed:
                ranks = sorted(failed)
                more = f" (and {len(ranks) - 1} more not started)" if len(ranks) > 1 else ""
                outcome = Outcome(1, failed[ranks[0]] + more)
                job.abort(1, "the launcher could not invoke every rank")
            else:
                display.activity("running")
                outcome = supervise(job, watcher, cfg, self.size, args.fill_timeout, t_invoke)
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
        links = getattr(job.state, "links", None)  # direct / punched / relayed, as the local backend reports
        summary = links.summary() if links is not None else None
        if summary:
            log(summary)
        log(cost_line(cfg, watcher, target.region, time.monotonic()))
        return outcome.code
