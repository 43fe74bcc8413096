"""``fmpi-lambda-local``: a Lambda endpoint on this machine, to rehearse ``fmpirun --backend lambda`` before AWS.

moto's AWS API (Lambda, IAM, S3, CloudWatch Logs, STS) with functions that
really run: each invocation is an ``awslambdaric`` process with only the
runtime's own packages on its path, under the limits Lambda enforces
(``sandbox``: memory, a read-only code folder, a size-limited /tmp, the
runtime's glibc and architecture, Lambda's environment). It creates the
execution role ``fmpi-rank`` and prints the commands that point fmpirun at
it; Ctrl-C stops it and every function still running.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading

from ..lambda_runtime.runtimes import RUNTIMES
from . import function_network
from .executor import Placement
from .sandbox import capabilities, is_root, remove_stale_cgroups

DEFAULT_PORT = 4599
ROLE = "fmpi-rank"
LOCAL_RUNTIME = f"python{sys.version_info.major}.{sys.version_info.minor}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fmpi-lambda-local",
        description="A local AWS Lambda endpoint that runs fmpi's functions as Lambda would (docs/lambda.md).",
    )
    p.add_argument("--host", help="address to listen on (default: the functions' bridge, "
                   f"{function_network.HOST_IP}, with --network nat; 127.0.0.1 with --network host)")
    p.add_argument("--network", choices=("nat", "host"),
                   help="nat: each function in a network namespace behind a NAT of its own that accepts no inbound "
                        "connection, as on Lambda (needs root, iproute2, iptables; the default where possible); "
                        "host: functions share this machine's network")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default %(default)s; 0: any free port)")
    p.add_argument("--work-dir", help="where function code and logs are kept (default: a fresh temporary folder)")
    p.add_argument("--concurrency", type=int, default=1000, help="the account's concurrency limit (default %(default)s)")
    p.add_argument("--role-propagation", type=float, default=10.0, metavar="S",
                   help="a role younger than this cannot be used yet, as on AWS while IAM propagates it (default %(default)s s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from .runtime_site import build_runtime_site
        from .server import MotoLambdaServer
    except ImportError as exc:
        print(f"fmpi-lambda-local: error: {exc}: pip install 'fmpi[lambda-local]'", file=sys.stderr)
        return 2
    if LOCAL_RUNTIME not in RUNTIMES:
        print(f"fmpi-lambda-local: error: Lambda has no {LOCAL_RUNTIME} runtime; run it with Python "
              f"{', '.join(r.version for r in RUNTIMES.values())}", file=sys.stderr)
        return 2
    can_nat, why_not = function_network.available()
    if args.network == "nat" and not can_nat:
        print(f"fmpi-lambda-local: error: --network nat {why_not}", file=sys.stderr)
        return 2
    network = function_network.FunctionNetwork() if args.network != "host" and can_nat else None
    host = args.host or (function_network.HOST_IP if network else "127.0.0.1")
    work = args.work_dir or tempfile.mkdtemp(prefix="fmpi-lambda-local-")
    remove_stale_cgroups()
    try:
        if network is not None:
            network.start()
        server = MotoLambdaServer(work, runtime_site=build_runtime_site(os.path.join(work, "runtime-site")),
                                  host=host, port=args.port, concurrency_limit=args.concurrency,
                                  role_propagation_s=args.role_propagation,
                                  placement=_behind_a_nat(network) if network else None)
        server.start()
    except OSError as exc:
        print(f"fmpi-lambda-local: error: cannot listen on {host}:{args.port}: {exc}", file=sys.stderr)
        if network is not None:
            network.close()
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        role = server.create_role(ROLE, age_s=args.role_propagation)
        print(_banner(server.endpoint_url, role, work, network is not None), flush=True)
        stop.wait()
    finally:
        server.stop()
        if network is not None:
            network.close()
    print("fmpi-lambda-local: stopped", flush=True)
    return 0


def _behind_a_nat(network: function_network.FunctionNetwork):
    def place(_spec, _payload) -> Placement:
        ns = network.acquire()
        return Placement(netns=ns, release=lambda: network.release(ns))

    return place


def _banner(endpoint: str, role: str, work: str, nat: bool) -> str:
    can = capabilities()
    runtime = RUNTIMES[LOCAL_RUNTIME]
    enforced = [f"{LOCAL_RUNTIME} only, its glibc ({runtime.glibc_text()}) and architecture for every library loaded",
                "read-only code folder", "Lambda's environment variables only", "function timeouts",
                "the account's concurrency", "no retries of failed asynchronous invocations when turned off"]
    missing = []
    if can["memory"]:
        enforced.append("the function's memory size (a cgroup)")
    else:
        missing.append("memory limits (needs root and a writable memory cgroup)")
    if can["tmp"]:
        enforced.append("a private /tmp of the function's ephemeral storage (512 MB unless configured)")
    else:
        missing.append("a private, size-limited /tmp (needs root)")
    if nat:
        enforced.append("no inbound connections: each function behind a NAT of its own (ranks must punch or relay)")
    else:
        missing.append("no inbound connections (needs root, iproute2 and iptables: --network nat)")
    relay = f"{function_network.HOST_IP}:0" if nat else "127.0.0.1:0"
    lines = [
        f"fmpi-lambda-local: a Lambda endpoint on {endpoint} (functions run as local processes; files in {work})",
        "enforced: " + "; ".join(enforced),
        "not enforced here: " + "; ".join(missing) + ("" if is_root() else " -- run as root for more"),
        "",
        "Rehearse a job (in another terminal):",
        f"  export AWS_ENDPOINT_URL={endpoint} AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1",
        f"  fmpirun --backend lambda -n 4 --role {role} --relay-listen {relay} python app.py",
        "Ctrl-C stops the endpoint and every function still running.",
    ]
    return "\n".join(lines)


def entry() -> None:
    sys.exit(main())
