"""``fmpirun``'s command line: its options in mpiexec-like groups, and bad input as one line with exit status 2."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from .. import __version__, settings
from ..rank.spec import DEFAULT_FILL_TIMEOUT
from . import relaunch
from .local import BIND_CHOICES

USAGE = """%(prog)s -n N [options] PROGRAM [ARGS...]
       %(prog)s -n N --print-join [--relay-listen HOST:PORT] [PROGRAM ARGS...]
       %(prog)s --join URL --job ID --size N PROGRAM [ARGS...]
       %(prog)s --help-env | --version"""

EXIT_CODES = """exit status:
  0      every rank exited 0
  N      the first rank that failed exited with status N (as mpiexec; an uncaught exception is 1)
  128+S  a rank was killed by signal S (137: SIGKILL), or fmpirun was (130: Ctrl-C)
  1      fmpi's own failure (relay unreachable, a rank stopped responding, ...)
  2      bad command line or FMPI_* variable (nothing was started)
  75     the job stopped at a checkpoint, to be launched again (fmpi.checkpoint; --max-runtime does it)
  124    local ranks did not all join within --fill-timeout, --max-runtime was spent, or a function timeout struck
  127    the program could not be started

example: fmpirun -n 4 python apps/pi.py"""


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line: ``fmpirun: error: ...`` (then ``--help``, not the whole usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _HelpEnv(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(settings.help_text())
        parser.exit(0)


class _Genv(argparse.Action):
    """mpiexec's ``-genv NAME VALUE``: the same list as ``-x NAME=VALUE``."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, *_: Any) -> None:
        name, value = values
        getattr(namespace, self.dest).append(f"{name}={value}")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="fmpirun",
        usage=USAGE,
        description="Run an MPI (mpi4py) program on fmpi ranks: local processes or serverless functions.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"fmpirun (fmpi) {__version__}")
    p.add_argument("--help-env", action=_HelpEnv, nargs=0, help="list the FMPI_* environment variables and exit")
    _ranks(p.add_argument_group("ranks"))
    _relay(p.add_argument_group("relay and channels"))
    _output(p.add_argument_group("environment and output"))
    _lambda(p.add_argument_group("Lambda backends (--backend lambda|localstack; see docs/lambda.md)"))
    relaunch.add_options(p)
    return p


def _ranks(g: argparse._ArgumentGroup) -> None:
    g.add_argument("-n", "-np", dest="n", type=int, metavar="N", help="number of ranks (required)")
    g.add_argument("command", nargs=argparse.REMAINDER, metavar="PROGRAM [ARGS...]",
                   help="python app.py, app.py (run with this Python) or any executable")
    g.add_argument("--backend", choices=["local", "lambda", "localstack"], default="local", help="where ranks run (default: local)")
    g.add_argument("--bind-to", choices=BIND_CHOICES, default="auto", help="local backend: bind each rank to one core (auto, the default: when the ranks outnumber the cores, the same number on each)")
    g.add_argument("--oversubscribe", action="store_true",
                   help="accepted for mpiexec compatibility and ignored: fmpi has no slots, any -n runs on the cores there are")
    g.add_argument("--fill-timeout", type=float, default=None, metavar="S", help=f"seconds for all ranks to join (default {DEFAULT_FILL_TIMEOUT:g}; local ranks: at least 0.5 s each; exit status 124 when they do not)")


def _relay(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--relay", metavar="URL",
                   help="use a running relay instead of starting one in fmpirun: tcp://host:port (fmpi-relay), tls://host:port "
                        "(fmpi-relay with TLS), tcp://a:7000,b:7000 (several: server-side collectives sharded over them), "
                        "redis://[:password@]host:port/db or rediss://... (Redis with TLS)")
    g.add_argument("--relay-listen", metavar="HOST:PORT", help="address of the relay fmpirun starts (default 127.0.0.1:0; for Lambda: 0.0.0.0:PORT with --relay-advertise)")
    g.add_argument("--channel", choices=["auto", "direct", "punch", "relay"], help="how links between ranks are made (sets FMPI_CHANNEL; default auto: direct or punched where possible, relayed where not)")
    g.add_argument("--print-join", action="store_true", help="create the job and print the command that joins a rank to it from another host")
    g.add_argument("--join", metavar="URL", help="join a job created with --print-join, as one rank")
    g.add_argument("--job", metavar="ID", help="job id (with --join)")
    g.add_argument("--rank", type=int, default=-1, metavar="R", help="rank slot to take (with --join; default: any free slot)")
    g.add_argument("--size", type=int, metavar="N", help="world size (with --join)")


def _output(g: argparse._ArgumentGroup) -> None:
    g.add_argument("-x", "--env", dest="env", action="append", default=[], metavar="VAR[=VALUE]",
                   help="pass VAR (its value here, or VALUE) to every rank, as mpiexec -x; repeatable "
                        "(Lambda ranks also get every FMPI_* variable set here)")
    g.add_argument("-genv", dest="env", action=_Genv, nargs=2, metavar=("NAME", "VALUE"), help="the same as -x NAME=VALUE (mpiexec's spelling)")
    g.add_argument("--tag-output", action="store_true", help="prefix every output line with [rank]")
    g.add_argument("--stdin", metavar="RANK|all|none", help="local backend: which rank reads fmpirun's standard input "
                   "(default 0, as with mpiexec; the others get /dev/null)")
    g.add_argument("--verbose", "-v", action="store_true",
                   help="report the job's progress on stderr, a line per event, and how the ranks were linked")


def _lambda(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--function-name", default="fmpi-rank", metavar="NAME", help="the function the ranks run in (default %(default)s)")
    g.add_argument("--memory", type=int, default=1769, metavar="MB", help="memory per function (default %(default)s MB = one vCPU)")
    g.add_argument("--ranks-per-function", type=int, metavar="K", help="run K ranks in each function invocation "
                   "(processes that link locally; collectives reduce inside a function first); default: one per "
                   "vCPU of --memory (Lambda gives 1 vCPU per 1769 MB, 6 at 10240 MB)")
    g.add_argument("--timeout", type=int, metavar="S", help="function timeout per rank (default and maximum 900 s); "
                   "with the local backend: each launch's deadline, as fmpi.remaining_time() reports it (default none)")
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
    g.add_argument("--spare", type=int, default=0, metavar="K",
                   help="invoke K spare ranks besides the N: the first N invocations to join form the world, so a "
                        "rank that straggles or never starts is replaced; the others exit at once (default 0)")
    g.add_argument("--report", metavar="FILE.json", help="write what the job cost (GB-s from Lambda's REPORT lines, "
                   "requests, relay data, checkpoint requests, dollars) with each rank's timings and links to FILE.json")
    g.add_argument("--prices", metavar="FILE.json", help="prices over the package's dated table for the cost "
                   "(default: FMPI_PRICES; docs/lambda.md 'What a job cost')")
    g.add_argument("--fanout-arity", type=int, metavar="K", help="start ranks through an invocation tree of arity K (0: all from fmpirun; default: a tree above 64 ranks)")


def listen_address(text: str) -> tuple[str, int]:
    """``--relay-listen HOST:PORT`` -> (host, port); ValueError in fmpirun's words."""
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--relay-listen needs HOST:PORT with a port 0-65535 (0: any free port), not {text!r}")
    return host or "127.0.0.1", int(port)
