"""fmpirun's options for the Lambda backends, checked and turned into what the launch needs, before any AWS call.

* the program and the folder deployed with it (``resolve_program``);
* the relay: a URL (``--relay``), or one fmpirun runs, listening on
  ``--relay-listen`` and announced to the functions as ``--relay-advertise``
  (on EC2 the public address is not on any interface, so the two differ);
* the function's configuration (``function_config``);
* what the ranks get from this side: their environment (``-x VAR``,
  ``--env VAR=VALUE``, and every FMPI_* tuning variable set here) and the CA
  of a tls:// relay (``rank_environment``, ``tls_ca``).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ... import settings
from ...lambda_runtime.event import EventError, Program, check_environment
from ...lambda_runtime.runtimes import (
    ARCHITECTURES,
    default_architecture,
    default_runtime,
    runtime_named,
)
from ...rank.spec import check_relay_url
from ..usage import UsageError
from .deploy import MAX_EVENT_AGE, MAX_TIMEOUT, MIN_EVENT_AGE, FunctionConfig
from .mpi4py_python import installed_mpi4py
from .resources import LOG_RETENTION_DAYS

BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")  # S3's rules, roughly
WILDCARDS = ("", "0.0.0.0", "::", "[::]")


@dataclass(frozen=True)
class RelayPlan:
    """Where the ranks meet: a relay given by URL, or one fmpirun runs (bound to `listen`, announced as `advertise`)."""

    url: str | None
    listen: tuple[str, int] | None = None
    advertise: tuple[str, int | None] | None = None  # port None: the port the relay got
    probe_port: int | None = None  # the embedded relay's NAT probe port (0: any free one)

    def url_for(self, bound: tuple[str, int]) -> str:
        assert self.advertise is not None
        host, port = self.advertise
        host = f"[{host}]" if ":" in host else host
        return f"tcp://{host}:{port or bound[1]}"


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
        if rest[1].split(".")[0] == "mpi4py" and installed_mpi4py() is None:
            raise UsageError(f"python -m {rest[1]} runs mpi4py's own Python modules against fmpi, and no mpi4py is "
                             "installed here to take them from: pip install mpi4py (only its .py files are deployed)")
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


def relay_plan(args: argparse.Namespace) -> RelayPlan:
    advertise = getattr(args, "relay_advertise", None)
    probe = getattr(args, "relay_probe_port", None)
    if args.relay:  # (it wins over --relay-listen, as with the local backend)
        if advertise or probe is not None:
            raise UsageError("--relay names a relay that runs elsewhere: --relay-advertise and --relay-probe-port "
                             "are for the relay fmpirun runs itself (--relay-listen)")
        check_relay_url(args.relay)  # tcp:// (fmpi-relay) or redis:// (the event carries it as is)
        return RelayPlan(args.relay)
    if args.relay_listen is None:
        raise UsageError(
            "the Lambda backends need a relay the functions can reach: run fmpi-relay on a host with a public "
            "address and pass --relay tcp://HOST:PORT, or let fmpirun run one here with --relay-listen 0.0.0.0:7000 "
            "--relay-advertise PUBLIC_ADDRESS:7000 (see docs/lambda.md)"
        )
    host, port = _host_port(args.relay_listen, "--relay-listen", need_port=True)
    if advertise is not None:
        announced = _host_port(advertise, "--relay-advertise", need_port=False)
    elif host in WILDCARDS:
        raise UsageError(
            f"--relay-listen {args.relay_listen} listens on every interface, and the functions need the address to "
            "connect to (not a wildcard address): pass it with --relay-advertise HOST[:PORT] (on EC2, the "
            "instance's public IP or DNS name)"
        )
    else:
        announced = (host, None)
    if probe is not None and not 0 <= probe <= 65535:
        raise UsageError(f"--relay-probe-port must be a port number, not {probe}")
    return RelayPlan(None, (host or "0.0.0.0", port), announced, probe)


def _host_port(text: str, option: str, need_port: bool) -> tuple[str, int | None]:
    host, sep, port = text.rpartition(":")
    if not sep or "]" in port:  # no port given (an IPv6 address in brackets has colons of its own)
        if need_port:
            raise UsageError(f"{option} needs HOST:PORT, not {text!r}")
        return text.strip("[]"), None
    try:
        number = int(port)
    except ValueError:
        raise UsageError(f"{option} needs HOST:PORT, not {text!r}") from None
    if not 0 <= number <= 65535:
        raise UsageError(f"{option}: {number} is not a port number")
    return host.strip("[]"), number


def unreachable_from_lambda(host: str) -> str | None:
    """Why a relay at `host` (an IP address) cannot be reached by functions on AWS, or None."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None  # a name: the ping tells
    if address.is_loopback:
        return "a loopback address (this machine only)"
    if address.is_unspecified or address.is_link_local:
        return "not an address other hosts can connect to"
    if not address.is_global:
        return "a private address (fmpi's functions run outside any VPC and reach only public addresses)"
    return None


def function_config(args: argparse.Namespace) -> FunctionConfig:
    if args.timeout is None:
        args.timeout = MAX_TIMEOUT
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
    if args.log_retention not in LOG_RETENTION_DAYS:
        raise UsageError(f"--log-retention must be one of CloudWatch's {', '.join(map(str, LOG_RETENTION_DAYS))} days")
    bucket = args.s3_bucket
    if bucket is not None and not BUCKET_NAME.match(bucket):
        raise UsageError(f"--s3-bucket {bucket!r} is not a valid S3 bucket name (3-63 lowercase letters, digits, dots, hyphens)")
    try:
        runtime = runtime_named(args.runtime) if args.runtime else default_runtime()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    architecture = args.arch or default_architecture()
    if architecture not in ARCHITECTURES:
        raise UsageError(f"--arch must be one of {', '.join(ARCHITECTURES)}, not {architecture!r}")
    layers = [arn.strip() for value in args.layers for arn in value.split(",") if arn.strip()]
    return FunctionConfig(
        name=args.function_name,
        memory=args.memory,
        timeout=args.timeout,
        runtime=runtime.name,
        architecture=architecture,
        role=args.role,
        layers=layers,
        max_event_age=int(min(MAX_EVENT_AGE, max(MIN_EVENT_AGE, args.fill_timeout))),
        log_retention=args.log_retention,
    )


MB_PER_VCPU = 1769  # Lambda gives a function one vCPU per 1769 MB of memory ...
MAX_VCPUS = 6  # ... and 6 at its 10240 MB maximum


def ranks_per_function(args: argparse.Namespace) -> int:
    """K of --ranks-per-function; by default one rank per vCPU that --memory buys (the nearest whole number,
    at least 1: 1769 MB is one vCPU, 3538 MB two, 10240 MB six)."""
    k = args.ranks_per_function
    if k is None:  # (with --spare: one rank per function, which spares need)
        return 1 if args.spare else max(1, min(MAX_VCPUS, round(args.memory / MB_PER_VCPU)))
    if k < 1:
        raise UsageError(f"--ranks-per-function must be at least 1 (got {k})")
    if k > 1 and args.spare:
        raise UsageError("--spare starts single ranks that take a free slot; it cannot be used with "
                         "--ranks-per-function above 1")
    return k


def rank_environment(assignments: list[str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment Lambda ranks get: FMPI_* tuning variables set here, then ``-x VAR`` / ``--env VAR[=VALUE]``."""
    environ = dict(os.environ) if environ is None else environ
    env = settings.for_lambda_ranks(environ)
    for item in assignments:
        name, eq, value = item.partition("=")
        if not eq:
            if name not in environ:
                raise UsageError(f"-x {name}: {name} is not set here; give it a value with --env {name}=VALUE")
            value = environ[name]
        env[name] = value
    try:
        check_environment(env)
        settings.read(env)  # a bad FMPI_* value fails here, once, not on every rank
    except (EventError, ValueError) as exc:
        raise UsageError(f"-x/--env: {exc}") from None
    return env


def tls_ca(relay_url: str, environ: dict[str, str] | None = None) -> str | None:
    """The PEM of FMPI_TLS_CA when the relay speaks TLS: a function has no file of ours, so its content travels."""
    if not relay_url.startswith(("tls://", "rediss://")):
        return None
    path = settings.tls_ca(environ)
    if path is None:
        return None
    try:
        pem = Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"FMPI_TLS_CA={path}: {exc}") from None
    if "BEGIN CERTIFICATE" not in pem:
        raise UsageError(f"FMPI_TLS_CA={path} is not a PEM certificate")
    return pem
