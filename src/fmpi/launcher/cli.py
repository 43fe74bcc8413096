"""``fmpirun``: start an fmpi job.

    fmpirun -n N [options] python app.py args...      N local rank processes
    fmpirun -n N [options] app.py args...             the same, with this Python
    fmpirun -n N --print-join [--relay-listen H:P]    create a job; print how ranks join it by hand
    fmpirun --join tcp://relay:port --job ID ... cmd  run one rank of such a job here

--relay tcp://a:7000,b:7000 uses several fmpi-relay nodes: the job's rendezvous
is on the first, its shared objects (server-side collectives) are sharded
over all of them. --relay redis://[:password@]host:port/db makes Redis the rendezvous and the
relay of the job (rendezvous/redis.py, redis_relay/); fmpirun behaves the same either way.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import socket
import sys
from pathlib import Path

from .. import settings
from ..rank.shim_path import SHIM_DIR
from ..rank.spec import (
    DEFAULT_FILL_TIMEOUT,
    RankSpec,
    SpecError,
    check_relay_url,
    token_in_environment,
)
from ..relay_server.server import RelayThread
from ..rendezvous.relay_connection import RelayError
from ..rendezvous.urls import FMPI_RELAY, display_url
from ..rendezvous.urls import parse as parse_url
from . import bytecode, closed_output, relaunch
from .cli_options import build_parser, listen_address
from .job import Job, failure_status, log
from .link_table import describe
from .local import _fmpi_root, run_local
from .progress import Progress
from .relays import host_objects
from .usage import UsageError


def resolve_command(command: list[str]) -> list[str]:
    """Check the program exists before any rank starts; run bare .py files with this Python."""
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no program given (e.g. fmpirun -n 4 python app.py)")
    first = command[0]
    if first.endswith(".py"):
        if not Path(first).is_file():
            raise UsageError(f"script not found: {first}")
        return [sys.executable, *command]
    if shutil.which(first) is None:
        if "/" in first and Path(first).is_file():
            raise UsageError(f"not executable: {first} (chmod +x it, or name its interpreter: fmpirun -n N python {first})")
        raise UsageError(f"program not found: {first}")
    if Path(first).name.startswith("python") and len(command) > 1:
        script = command[1]
        if not script.startswith("-") and not Path(script).is_file():
            raise UsageError(f"script not found: {script}")
    return command


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.fill_timeout is None:
        args.fill_timeout = default_fill_timeout(args.backend, args.n or 0)
    closed_output.arm()
    try:
        if args.join:
            return _join(args)
        return relaunch.run(args, _launch, _default_checkpoint_url)
    except UsageError as exc:
        print(f"fmpirun: error: {exc}", file=sys.stderr)
        return 2
    except RelayError as exc:
        hint = ""
        if exc.code == "timeout" and args.relay and parse_url(args.relay).scheme == "tcp":
            hint = " (is it a Redis server? Redis is redis://host:port)"
        print(f"fmpirun: error: {exc}{hint}", file=sys.stderr)
        return 1
    except (SpecError, ValueError) as exc:
        print(f"fmpirun: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # (while connecting to the relay: the ranks' own Ctrl-C is handled in local.py)
        print("fmpirun: interrupted", file=sys.stderr)
        return 130


def _default_checkpoint_url(args: argparse.Namespace) -> str:
    if args.backend == "local":
        return relaunch.local_default_url(args)
    from .lambda_backend.checkpoints import default_checkpoint_url

    return default_checkpoint_url(args)


def default_fill_timeout(backend: str, n: int) -> float:
    """--fill-timeout when not given: 60 s, and for local ranks at least half a second each (256 Pythons
    starting on 2 busy cores took over a minute to join; a rank process that was started does join)."""
    return max(DEFAULT_FILL_TIMEOUT, 0.5 * n) if backend == "local" else DEFAULT_FILL_TIMEOUT


def _check_launch_args(args: argparse.Namespace) -> None:
    """Usage errors of a launch that no backend needs to see first (one line, status 2)."""
    if args.n is None:
        raise UsageError("the number of ranks is required: -n N")
    if args.n < 1:
        raise UsageError(f"-n must be at least 1 (got {args.n})")
    if args.fill_timeout <= 0:
        raise UsageError("--fill-timeout must be positive")
    if args.relay:
        try:
            check_relay_url(args.relay)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if args.spare < 0:
        raise UsageError(f"--spare must be 0 or more (got {args.spare})")
    if args.backend == "local" and args.spare:
        raise UsageError("--spare is for the Lambda backends (local ranks do not straggle): use it with --backend "
                         "lambda or localstack")
    if args.ranks_per_function is not None and args.ranks_per_function < 1:
        raise UsageError(f"--ranks-per-function must be at least 1 (got {args.ranks_per_function})")
    if args.backend == "local" and args.ranks_per_function is not None:
        raise UsageError("--ranks-per-function is for the Lambda backends (local ranks are processes of this host "
                         "already): use it with --backend lambda or localstack")
    if args.backend == "local" and (args.report or args.prices):
        raise UsageError(f"{'--report' if args.report else '--prices'} is for the Lambda backends (what a job cost "
                         "there): use it with --backend lambda or localstack")


def _launch(args: argparse.Namespace) -> int:
    if args.cleanup:
        if args.backend == "local":
            raise UsageError("--cleanup removes what fmpirun created on AWS: use it with --backend lambda or localstack")
        from .lambda_backend.launch import run as run_lambda

        return run_lambda(args)
    _check_launch_args(args)
    if args.backend != "local":
        if args.bind_to != "auto":
            raise UsageError("--bind-to works with the local backend only (a Lambda function has its own CPUs)")
        if args.print_join or args.stdin not in (None, "none"):
            raise UsageError(f"{'--print-join' if args.print_join else '--stdin'} works with the local backend only (a Lambda function has no standard input)")
        from .lambda_backend.launch import run as run_lambda

        return run_lambda(args)
    command = None if args.print_join else resolve_command(args.command)
    _export(args.env)

    try:
        # The ranks read these; a mistake is cheaper to report here, once, than on every rank.
        transport = settings.read()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    relay = None
    if args.relay:
        relay_url = args.relay
    else:
        relay_listen = args.relay_listen or "127.0.0.1:0"
        try:
            host, port = listen_address(relay_listen)
            relay = RelayThread(host, port, heartbeat_timeout=transport.heartbeat_timeout)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        except OSError as exc:
            raise UsageError(f"cannot start the relay on {relay_listen}: {exc.strerror or exc}") from None
        relay_url = "tcp://{}:{}".format(*relay.address)

    # The live line only for a local launch on a terminal: --print-join's ranks print elsewhere.
    progress = Progress(args.n, args.verbose, live=not args.print_join and sys.stderr.isatty())
    job = Job(
        relay_url, args.n, args.fill_timeout, on_output=_print_output, on_event=progress.on_event,
        channel=args.channel or "", embedded_relay=relay is not None,
    )
    if args.verbose:
        log(f"job {job.id}: {args.n} ranks, relay {display_url(relay_url)}")
    objects = None
    try:
        objects = host_objects(job, relay_url)
        if args.print_join:
            outcome_code = _serve_join(job, relay_url, args.command)  # (it runs on the joining hosts: as typed)
        else:
            bytecode.warm()
            outcome = run_local(job, command, args.tag_output, args.bind_to, args.stdin, on_start=progress.rank_started)
            progress.stop()
            if outcome.message and outcome.code != relaunch.RESUME_EXIT:  # (the ranks said why themselves)
                log(outcome.message)
            outcome_code = outcome.code
        if args.verbose:
            _report_links(job, progress.links_shown, outcome_code == 0)
    finally:
        progress.stop()
        if objects is not None:
            objects.end()
        job.end()
        if relay is not None:
            relay.stop()
    return outcome_code


def _export(assignments: list[str]) -> None:
    """-x VAR[=VALUE] for local ranks: they inherit fmpirun's environment, so a value given is set here."""
    for item in assignments:
        name, eq, value = item.partition("=")
        if not name:
            raise UsageError(f"-x/--env needs VAR or VAR=VALUE, not {item!r}")
        if eq:
            os.environ[name] = value
        elif name not in os.environ:
            raise UsageError(f"-x {name}: {name} is not set here; give it a value with --env {name}=VALUE")


def _reachable(relay_url: str) -> tuple[str, str]:
    """The relay's URL as other hosts can use it, and a note: a relay listening on every interface
    (0.0.0.0) is reached at one of this machine's addresses, not at 0.0.0.0."""
    host, _, port = relay_url.removeprefix("tcp://").rpartition(":")
    if host not in ("0.0.0.0", "::", "[::]"):
        return relay_url, ""
    addresses = _this_hosts_addresses()
    if not addresses:
        return f"tcp://THIS_HOST:{port}", "\n(the relay listens on every interface: put an address of this host for THIS_HOST)"
    others = f"; this host also has {', '.join(addresses[1:])}" if len(addresses) > 1 else ""
    return f"tcp://{addresses[0]}:{port}", f"\n(the relay listens on every interface; use an address the ranks' hosts can reach{others})"


def _this_hosts_addresses() -> list[str]:
    """This machine's IPv4 addresses other than loopback, the one of the default route first."""
    found: list[str] = []
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # (TEST-NET: a UDP connect only picks the route, sends nothing)
            found.append(probe.getsockname()[0])
    except OSError:
        pass
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
    except OSError:
        infos = []
    found += [info[4][0] for info in infos]
    return list(dict.fromkeys(a for a in found if not a.startswith("127.")))


def _report_links(job: Job, shown: set[tuple[int, int]], complete: bool) -> None:
    """(-v) The links not shown as they formed, then how many were direct / punched / relayed and how long set-up took."""
    if complete:  # the ranks' FINISHED reports may trail their exits by a moment
        job.wait(lambda s: len(s.finished) + len(s.lost) >= job.size, 1.0)
    summary = job.state.links.summary()
    if summary:
        for pair, entry in sorted(job.state.links.links.items()):
            if pair not in shown or entry["failovers"]:  # (a pair that failed over: its final state too)
                log(describe(pair, entry))
        log(summary)


def _serve_join(job: Job, relay_url: str, command: list[str] | None) -> int:
    """Print how to join, then follow the job until every rank has finished."""
    url, note = _reachable(relay_url)
    program = shlex.join(command) if command else "python your_program.py"
    print(f"Job {job.id} is waiting for {job.size} ranks. On each host, run:", flush=True)
    sharded = "FMPI_SHARD_RENDEZVOUS=1 " if job.sharded else ""  # (the joining rank registers at its own relay)
    print(f"  {sharded}FMPI_TOKEN={job.token} fmpirun --join {url} --job {job.id} --size {job.size} {program}", flush=True)
    print("(keep the token secret: it admits ranks to the job)" + note, flush=True)
    try:
        job.wait(lambda s: len(s.finished) + len(s.lost) >= job.size or s.failure is not None or s.abort is not None, None)
    except KeyboardInterrupt:
        job.abort(130, "interrupted by the launcher")
        return 130
    state = job.state
    if state.failure is not None:
        log(str(state.failure))
        return failure_status(state.failure)
    if state.abort is not None:
        log(str(state.abort))
        return state.abort.exit_code
    if state.lost:
        log(f"ranks {sorted(state.lost)} ended without finalizing")
        return 1
    bad = {r: c for r, c in state.finished.items() if c}
    return next(iter(bad.values()), 0)


def _sharded(url: str) -> bool:
    """Whether a rank joined by hand at `url` registers at its own relay of several (FMPI_SHARD_RENDEZVOUS=1)."""
    try:
        parsed = parse_url(url)
    except ValueError:
        return False  # (the spec says what is wrong with it)
    return settings.current().shard_rendezvous and parsed.kind == FMPI_RELAY and len(parsed.addresses) > 1


def _join(args: argparse.Namespace) -> int:
    if not args.job or args.size is None:
        raise UsageError("--join needs --job ID and --size N")
    token = token_in_environment()
    if not token:
        raise UsageError("set FMPI_TOKEN to the job's token (fmpirun --print-join shows it)")
    command = resolve_command(args.command)
    try:
        spec = RankSpec(args.job, args.rank, args.size, args.join, token,
                        fill_timeout=args.fill_timeout, channel=args.channel or "", sharded=_sharded(args.join))
    except SpecError as exc:
        raise UsageError(str(exc)) from None
    env = dict(os.environ)
    env.update(spec.to_env())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SHIM_DIR, _fmpi_root(), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    os.execvpe(command[0], command, env)
    return 127  # not reached


def _print_output(rank: int, stream: str, data: str) -> None:
    closed_output.write(sys.stderr if stream == "stderr" else sys.stdout, data)


def entry() -> None:
    # (SIGPIPE stays ignored: `fmpirun ... | head` is handled in closed_output.py.)
    sys.exit(main())


if __name__ == "__main__":
    entry()
