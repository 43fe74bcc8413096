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
from ..rendezvous.urls import display_url
from . import bytecode, closed_output
from .job import Job, log
from .link_table import describe_event
from .local import BIND_CHOICES, _fmpi_root, run_local
from .relays import host_objects


class UsageError(Exception):
    """Bad command line: one message, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fmpirun",
        description="Run an MPI (mpi4py) program on fmpi ranks: local processes or serverless functions.",
        epilog="Example: fmpirun -n 4 python apps/pi.py",
    )
    p.add_argument("-n", "-np", dest="n", type=int, help="number of ranks")
    p.add_argument("--backend", choices=["local", "lambda", "localstack"], default="local", help="where ranks run (default: local)")
    p.add_argument("--relay", metavar="URL", help="use this relay instead of starting one in fmpirun: tcp://host:port (fmpi-relay; tcp://a:7000,b:7000 shards server-side collectives over several) or redis://[:password@]host:port/db")
    p.add_argument("--channel", choices=["auto", "direct", "punch", "relay"], help="how links between ranks are made (sets FMPI_CHANNEL; default auto: direct or punched where possible, relayed where not)")
    p.add_argument("--relay-listen", metavar="HOST:PORT", help="address of the relay fmpirun starts (default 127.0.0.1:0; for Lambda: 0.0.0.0:PORT with --relay-advertise)")
    p.add_argument("--tag-output", action="store_true", help="prefix every output line with [rank]")
    p.add_argument("--bind-to", choices=BIND_CHOICES, default="auto", help="local backend: bind each rank to one core (auto, the default: when the ranks outnumber the cores, the same number on each)")
    p.add_argument("--fill-timeout", type=float, default=DEFAULT_FILL_TIMEOUT, metavar="S", help="seconds for all ranks to join (default %(default)g)")
    p.add_argument("--verbose", "-v", action="store_true", help="report job progress on stderr")
    p.add_argument("--print-join", action="store_true", help="create the job and print the command that joins a rank to it")
    p.add_argument("--join", metavar="URL", help="join a job created with --print-join, as one rank")
    p.add_argument("--job", help="job id (with --join)")
    p.add_argument("--rank", type=int, default=-1, help="rank slot to take (with --join; default: any free slot)")
    p.add_argument("--size", type=int, help="world size (with --join)")
    p.add_argument("-x", "--env", dest="env", action="append", default=[], metavar="VAR[=VALUE]",
                   help="pass VAR (its value here, or VALUE) to every rank, as mpiexec -x; repeatable "
                        "(Lambda ranks also get every FMPI_* variable set here)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments")
    g = p.add_argument_group("Lambda backends (--backend lambda|localstack; see docs/lambda.md)")
    g.add_argument("--function-name", default="fmpi-rank", metavar="NAME", help="the function the ranks run in (default %(default)s)")
    g.add_argument("--memory", type=int, default=1769, metavar="MB", help="memory per rank (default %(default)s MB = one vCPU)")
    g.add_argument("--timeout", type=int, default=900, metavar="S", help="function timeout per rank (default and maximum 900 s)")
    g.add_argument("--role", metavar="ARN", help="execution role for a new function (ARN or role name)")
    g.add_argument("--region", help="AWS region (default: from the AWS configuration)")
    g.add_argument("--profile", help="AWS profile (default: from the AWS configuration)")
    g.add_argument("--layers", action="append", default=[], metavar="ARN", help="layer ARNs (comma-separated or repeated)")
    g.add_argument("--code", metavar="DIR", help="directory deployed with the program (default: the script's directory)")
    g.add_argument("--endpoint-url", metavar="URL", help="AWS endpoint (default: AWS_ENDPOINT_URL; localstack: http://localhost:4566)")
    g.add_argument("--s3-bucket", metavar="NAME", help="S3 bucket for packages over Lambda's 50 MB direct-upload limit (default: fmpi-code-ACCOUNT-REGION, created if missing)")
    g.add_argument("--no-bundle-deps", action="store_true", help="leave numpy and powertools out of the zip (a layer provides them; same as --deps none)")
    g.add_argument("--deps", choices=["target", "local", "none"], default="target", help="where the bundled dependencies come from: built for the runtime with pip (target, the default), copied from this environment (local), or none")
    g.add_argument("--runtime", metavar="NAME", help="the Lambda runtime: python3.11 (Amazon Linux 2, glibc 2.26), python3.12, python3.13 or python3.14 (Amazon Linux 2023, glibc 2.34); default: this Python's version")
    g.add_argument("--arch", choices=["x86_64", "arm64"], help="the functions' architecture (default: this machine's; arm64 is cheaper)")
    g.add_argument("--relay-advertise", metavar="HOST[:PORT]", help="the address the functions connect to for the relay fmpirun runs (--relay-listen 0.0.0.0:7000 --relay-advertise PUBLIC_IP:7000)")
    g.add_argument("--relay-probe-port", type=int, metavar="PORT", help="the NAT probe port of the relay fmpirun runs (default: any free port; fix it to open it in a firewall)")
    g.add_argument("--dry-run", action="store_true", help="build the package and list what is in it, deploy nothing (with --cleanup: list what would be deleted)")
    g.add_argument("--cleanup", action="store_true", help="delete what fmpirun created in the region (functions, log groups, the code bucket; found by their fmpi tag)")
    g.add_argument("--log-retention", type=int, default=14, metavar="DAYS", help="retention of the log group fmpirun creates for a new function (default %(default)s days)")
    g.add_argument("--no-log-output", action="store_true", help="do not copy the program's output into CloudWatch Logs (ingestion is billed per GB)")
    g.add_argument("--fanout-arity", type=int, metavar="K", help="start ranks through an invocation tree of arity K (0: all from fmpirun; default: a tree above 64 ranks)")
    return p


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
        raise UsageError(f"program not found: {first}")
    if Path(first).name.startswith("python") and len(command) > 1:
        script = command[1]
        if not script.startswith("-") and not Path(script).is_file():
            raise UsageError(f"script not found: {script}")
    return command


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    closed_output.arm()
    try:
        if args.join:
            return _join(args)
        return _launch(args)
    except UsageError as exc:
        print(f"fmpirun: error: {exc}", file=sys.stderr)
        return 2
    except (RelayError, SpecError, ValueError) as exc:
        print(f"fmpirun: error: {exc}", file=sys.stderr)
        return 1


def _launch(args: argparse.Namespace) -> int:
    if args.cleanup:
        if args.backend == "local":
            raise UsageError("--cleanup removes what fmpirun created on AWS: use it with --backend lambda or localstack")
        from .lambda_backend.launch import run as run_lambda

        return run_lambda(args)
    if args.n is None:
        raise UsageError("the number of ranks is required: -n N")
    if args.n < 1:
        raise UsageError(f"-n must be at least 1 (got {args.n})")
    if args.fill_timeout <= 0:
        raise UsageError("--fill-timeout must be positive")
    if args.backend != "local":
        if args.bind_to != "auto":
            raise UsageError("--bind-to works with the local backend only (a Lambda function has its own CPUs)")
        if args.print_join:
            raise UsageError("--print-join works with the local backend only")
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
        check_relay_url(relay_url)
    else:
        relay_listen = args.relay_listen or "127.0.0.1:0"
        host, _, port = relay_listen.rpartition(":")
        try:
            relay = RelayThread(host or "127.0.0.1", int(port), heartbeat_timeout=transport.heartbeat_timeout)
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot start the relay on {relay_listen}: {exc}") from None
        relay_url = "tcp://{}:{}".format(*relay.address)

    def on_event(kind: str, body: dict) -> None:
        if args.verbose and kind in ("joined", "world", "lost", "finished"):
            log(f"{kind}: {body}")
        elif args.verbose and kind == "link":
            log(describe_event(body))

    job = Job(
        relay_url, args.n, args.fill_timeout, on_output=_print_output, on_event=on_event, channel=args.channel or "",
        embedded_relay=relay is not None,
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
            outcome = run_local(job, command, args.tag_output, args.bind_to)
            if outcome.message:
                log(outcome.message)
            outcome_code = outcome.code
        _report_links(job, args.verbose, outcome_code == 0)
    finally:
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


def _report_links(job: Job, verbose: bool, complete: bool) -> None:
    """How many links were direct / punched / relayed, and how long set-up took."""
    if complete:  # the ranks' FINISHED reports may trail their exits by a moment
        job.wait(lambda s: len(s.finished) + len(s.lost) >= job.size, 1.0)
    summary = job.state.links.summary()
    if summary:
        for line in job.state.links.details() if verbose else ():
            log(line)
        log(summary)


def _serve_join(job: Job, relay_url: str, command: list[str] | None) -> int:
    """Print how to join, then follow the job until every rank has finished."""
    url, note = _reachable(relay_url)
    program = shlex.join(command) if command else "python your_program.py"
    print(f"Job {job.id} is waiting for {job.size} ranks. On each host, run:", flush=True)
    print(f"  FMPI_TOKEN={job.token} fmpirun --join {url} --job {job.id} --size {job.size} {program}", flush=True)
    print("(keep the token secret: it admits ranks to the job)" + note, flush=True)
    try:
        job.wait(lambda s: len(s.finished) + len(s.lost) >= job.size or s.failure is not None or s.abort is not None, None)
    except KeyboardInterrupt:
        job.abort(130, "interrupted by the launcher")
        return 130
    state = job.state
    if state.failure is not None:
        log(str(state.failure))
        return 1
    if state.abort is not None:
        log(str(state.abort))
        return state.abort.exit_code
    if state.lost:
        log(f"ranks {sorted(state.lost)} ended without finalizing")
        return 1
    bad = {r: c for r, c in state.finished.items() if c}
    return next(iter(bad.values()), 0)


def _join(args: argparse.Namespace) -> int:
    if not args.job or args.size is None:
        raise UsageError("--join needs --job ID and --size N")
    token = token_in_environment()
    if not token:
        raise UsageError("set FMPI_TOKEN to the job's token (fmpirun --print-join shows it)")
    command = resolve_command(args.command)
    spec = RankSpec(args.job, args.rank, args.size, args.join, token, fill_timeout=args.fill_timeout, channel=args.channel or "")
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
