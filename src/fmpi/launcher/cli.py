"""``fmpirun``: start an fmpi job.

    fmpirun -n N [options] python app.py args...      N local rank processes
    fmpirun -n N [options] app.py args...             the same, with this Python
    fmpirun -n N --print-join [--relay-listen H:P]    create a job; print how ranks join it by hand
    fmpirun --join tcp://relay:port --job ID ... cmd  run one rank of such a job here
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from pathlib import Path

from ..relay.client import RelayError, parse_relay_url
from ..relay.server import RelayThread
from .job import Job, log
from .local import SHIM_DIR, _fmpi_root, run_local
from .rankspec import DEFAULT_FILL_TIMEOUT, RankSpec, SpecError


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
    p.add_argument("--relay", metavar="URL", help="use this relay (tcp://host:port) instead of starting one in fmpirun")
    p.add_argument("--relay-listen", metavar="HOST:PORT", default="127.0.0.1:0", help="address of the relay fmpirun starts (default 127.0.0.1:0)")
    p.add_argument("--tag-output", action="store_true", help="prefix every output line with [rank]")
    p.add_argument("--fill-timeout", type=float, default=DEFAULT_FILL_TIMEOUT, metavar="S", help="seconds for all ranks to join (default %(default)g)")
    p.add_argument("--verbose", "-v", action="store_true", help="report job progress on stderr")
    p.add_argument("--print-join", action="store_true", help="create the job and print the command that joins a rank to it")
    p.add_argument("--join", metavar="URL", help="join a job created with --print-join, as one rank")
    p.add_argument("--job", help="job id (with --join)")
    p.add_argument("--rank", type=int, default=-1, help="rank slot to take (with --join; default: any free slot)")
    p.add_argument("--size", type=int, help="world size (with --join)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments")
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
    if args.n is None:
        raise UsageError("the number of ranks is required: -n N")
    if args.n < 1:
        raise UsageError(f"-n must be at least 1 (got {args.n})")
    if args.fill_timeout <= 0:
        raise UsageError("--fill-timeout must be positive")
    if args.backend != "local":
        raise UsageError(f"the {args.backend} backend is not available in this version of fmpi")
    command = None if args.print_join else resolve_command(args.command)

    relay = None
    if args.relay:
        relay_url = args.relay
        parse_relay_url(relay_url)
    else:
        host, _, port = args.relay_listen.rpartition(":")
        try:
            relay = RelayThread(host or "127.0.0.1", int(port))
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot start the relay on {args.relay_listen}: {exc}") from None
        relay_url = "tcp://{}:{}".format(*relay.address)

    def on_event(kind: str, body: dict) -> None:
        if args.verbose and kind in ("joined", "world", "lost", "finished"):
            log(f"{kind}: {body}")

    job = Job(relay_url, args.n, args.fill_timeout, on_output=_print_output, on_event=on_event)
    if args.verbose:
        log(f"job {job.id}: {args.n} ranks, relay {relay_url}")
    try:
        if args.print_join:
            outcome_code = _serve_join(job, relay_url)
        else:
            outcome = run_local(job, command, args.tag_output)
            if outcome.message:
                log(outcome.message)
            outcome_code = outcome.code
    finally:
        job.end()
        if relay is not None:
            relay.stop()
    return outcome_code


def _serve_join(job: Job, relay_url: str) -> int:
    """Print how to join, then follow the job until every rank has finished."""
    print(f"Job {job.id} is waiting for {job.size} ranks. On each host, run:", flush=True)
    print(f"  FMPI_TOKEN={job.token} fmpirun --join {relay_url} --job {job.id} --size {job.size} python app.py", flush=True)
    print("(keep the token secret: it admits ranks to the job)", flush=True)
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
    token = os.environ.get("FMPI_TOKEN")
    if not token:
        raise UsageError("set FMPI_TOKEN to the job's token (fmpirun --print-join shows it)")
    command = resolve_command(args.command)
    spec = RankSpec(args.job, args.rank, args.size, args.join, token, fill_timeout=args.fill_timeout)
    env = dict(os.environ)
    env.update(spec.to_env())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SHIM_DIR, _fmpi_root(), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    os.execvpe(command[0], command, env)
    return 127  # not reached


def _print_output(rank: int, stream: str, data: str) -> None:
    sink = sys.stderr if stream == "stderr" else sys.stdout
    sink.write(data)
    sink.flush()


def entry() -> None:
    # Restore default SIGPIPE so `fmpirun ... | head` ends quietly.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())


if __name__ == "__main__":
    entry()
