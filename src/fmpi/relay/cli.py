"""``fmpi-relay``: run the rendezvous relay as a standalone service."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from .server import RelayServer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fmpi-relay", description="The fmpi rendezvous relay: ranks of fmpi jobs meet here.")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default %(default)s)")
    p.add_argument("--port", type=int, default=7000, help="port to listen on (default %(default)s; 0 picks a free one)")
    p.add_argument("--max-jobs", type=int, default=10_000, help="jobs held at once (default %(default)s)")
    p.add_argument(
        "--probe-port", type=int, default=0,
        help="second port ranks use to detect symmetric NATs (default: any free port; open it in the firewall too; -1 disables)",
    )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s fmpi-relay %(levelname)s %(message)s")
    try:
        return asyncio.run(_serve(args))
    except KeyboardInterrupt:
        return 0


async def _serve(args: argparse.Namespace) -> int:
    server = RelayServer(args.host, args.port, max_jobs=args.max_jobs, probe_port=None if args.probe_port < 0 else args.probe_port)
    try:
        await server.start()
    except OSError as exc:
        print(f"fmpi-relay: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    host, port = server.address
    # The line tests and scripts wait for; flushed so a pipe sees it at once.
    print(f"fmpi-relay listening on tcp://{host}:{port}", flush=True)
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


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
