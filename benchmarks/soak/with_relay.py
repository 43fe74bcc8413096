"""Run one fmpirun job against a relay service started here, and report the service's peak memory.

    .venv/bin/python benchmarks/soak/with_relay.py -- -n 8 --channel relay python benchmarks/soak/messages_100k.py
    .venv/bin/python benchmarks/soak/with_relay.py --redis -- -n 8 --channel relay python benchmarks/soak/messages_100k.py --messages 20000

Starts a real ``fmpi-relay`` (or, with ``--redis``, a ``redis-server`` on a
free port), runs ``fmpirun --relay URL ARGS...``, and prints the service's
peak RSS (VmHWM from /proc) after the job; exits with fmpirun's status.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rendezvous_1024 import BIN, RedisService, RelayService, proc_status  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--redis", action="store_true", help="a redis-server instead of fmpi-relay")
    p.add_argument("fmpirun_args", nargs=argparse.REMAINDER, help="-- then fmpirun's arguments (without --relay)")
    args = p.parse_args()
    rest = args.fmpirun_args[1:] if args.fmpirun_args[:1] == ["--"] else args.fmpirun_args
    service = RedisService() if args.redis else RelayService()
    try:
        before = proc_status(service.proc.pid)
        code = subprocess.call([str(BIN / "fmpirun"), "--relay", service.url, *rest])
        after = proc_status(service.proc.pid)
        name = "redis-server" if args.redis else "fmpi-relay"
        extra = ""
        if args.redis:
            extra = f", Redis used_memory_peak {service.client.info('memory')['used_memory_peak'] / 2**20:.1f} MiB"
            left = list(service.client.scan_iter(match="fmpi:*", count=1000))
            extra += f", {len(left)} fmpi keys left"
        print(f"{name}: RSS before {before['VmRSS'] / 1024:.1f} MiB, peak RSS (VmHWM) {after['VmHWM'] / 1024:.1f} MiB{extra}",
              flush=True)
        return code
    finally:
        service.stop()


if __name__ == "__main__":
    sys.exit(main())
