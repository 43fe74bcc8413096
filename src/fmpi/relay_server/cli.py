"""``fmpi-relay``: run the rendezvous relay as a standalone service."""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import signal
import ssl
import sys

from ..wire.names import DEFAULT_MAX_NAMES, DEFAULT_MAX_PER_JOB
from .server import RelayServer, server_tls_context
from .strangers import DEFAULT_MAX_STRANGERS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fmpi-relay", description="The fmpi rendezvous relay: ranks of fmpi jobs meet here.")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default %(default)s)")
    p.add_argument("--port", type=int, default=7000, help="port to listen on (default %(default)s; 0 picks a free one)")
    p.add_argument("--max-jobs", type=int, default=10_000, help="jobs held at once (default %(default)s)")
    p.add_argument("--max-names", type=int, default=DEFAULT_MAX_NAMES, metavar="N",
                   help="service names (MPI Publish_name) held at once; a job may hold at most "
                        f"{DEFAULT_MAX_PER_JOB} (default %(default)s)")
    p.add_argument("--max-strangers", type=int, default=DEFAULT_MAX_STRANGERS, metavar="N",
                   help="connections held before their first request; one more drops the oldest (default %(default)s; "
                        "raise it for jobs of more ranks that connect long before they register)")
    p.add_argument(
        "--probe-port", type=int, default=0,
        help="second port ranks use to detect symmetric NATs (default: any free port; open it in the firewall too; -1 disables)",
    )
    p.add_argument(
        "--dso-max-value", type=_size, default=64 << 20, metavar="BYTES",
        help="largest value one shared-object call may carry, e.g. 64M (default 64M); larger calls are refused",
    )
    p.add_argument(
        "--dso-job-bytes", type=_size, default=256 << 20, metavar="BYTES",
        help="memory the shared objects of one job may hold on this relay, e.g. 1G (default 256M)",
    )
    p.add_argument(
        "--heartbeat-timeout", type=float, default=4.0, metavar="S",
        help="a rank silent this long (no heartbeat: its host vanished, or it is stopped) is lost (default %(default)s)",
    )
    p.add_argument(
        "--reconnect-grace", type=float, default=2.0, metavar="S",
        help="a rank whose connection broke (a reset, not its exit) may reconnect within this long before it is lost "
        "(default %(default)s)",
    )
    p.add_argument(
        "--tls-cert", metavar="PEM",
        help="serve TLS with this certificate (chain, PEM); clients then use tls://host:port (see docs/troubleshooting.md)",
    )
    p.add_argument("--tls-key", metavar="PEM", help="the certificate's private key (PEM; default: in the --tls-cert file)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = p.parse_args(argv)
    if not 0 <= args.port <= 65535:
        p.error(f"--port must be 0-65535 (0: any free port), not {args.port}")
    if not -1 <= args.probe_port <= 65535:
        p.error(f"--probe-port must be 0-65535 (0: any free port; -1: none), not {args.probe_port}")
    if args.max_strangers < 1:
        p.error("--max-strangers must be at least 1")
    if not args.heartbeat_timeout > 0:
        p.error("--heartbeat-timeout must be positive")
    if not args.reconnect_grace > 0:
        p.error("--reconnect-grace must be positive")
    if args.tls_key and not args.tls_cert:
        p.error("--tls-key needs --tls-cert")
    args.ssl_context = None
    if args.tls_cert:
        try:
            args.ssl_context = server_tls_context(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as exc:
            print(f"fmpi-relay: error: cannot load the TLS certificate {args.tls_cert}"
                  f"{' / key ' + args.tls_key if args.tls_key else ''}: {exc}", file=sys.stderr)
            return 1
    logging.basicConfig(level=args.log_level, format="%(asctime)s fmpi-relay %(levelname)s %(message)s")
    _raise_open_files_limit(args.max_strangers)
    try:
        return asyncio.run(_serve(args))
    except KeyboardInterrupt:
        return 0


def _raise_open_files_limit(strangers: int) -> None:
    """A relay holds a socket per rank and per stranger: take the hard limit on open files, not the shell's 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard == resource.RLIM_INFINITY else min(hard, max(soft, 65536, 2 * strangers))
    if want != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass  # (the limit stays; strangers are dropped oldest first when they are too many)


async def _serve(args: argparse.Namespace) -> int:
    server = RelayServer(
        args.host, args.port, max_jobs=args.max_jobs, probe_port=None if args.probe_port < 0 else args.probe_port,
        dso_max_value=args.dso_max_value, dso_job_bytes=args.dso_job_bytes, heartbeat_timeout=args.heartbeat_timeout,
        reconnect_grace=args.reconnect_grace, ssl_context=args.ssl_context, max_strangers=args.max_strangers,
        max_names=args.max_names,
    )
    try:
        await server.start()
    except OSError as exc:
        print(f"fmpi-relay: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    host, port = server.address
    # The line tests and scripts wait for; flushed so a pipe sees it at once.
    scheme = "tls" if args.ssl_context is not None else "tcp"
    print(f"fmpi-relay listening on {scheme}://{host}:{port}", flush=True)
    if server.probe_port:
        print(f"fmpi-relay NAT probe port {server.probe_port} (ranks behind NATs connect to it too)", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    serving = asyncio.create_task(server.serve_forever())
    await stop.wait()
    await server.close()
    serving.cancel()
    return 0


def _size(text: str) -> int:
    """'4096', '64K', '64M', '1G' -> bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    try:
        value = int(t[:-1]) * units[t[-1]] if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4096, 64K, 64M, 1G)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, not {text!r}")
    return value


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
