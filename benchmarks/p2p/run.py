"""Point-to-point report: fmpi vs a bare Python socket and vs MPICH (TCP and shared memory), one run.

    python benchmarks/p2p/run.py [--max-size BYTES] [--seconds S] [--repeat K]

Prints a Markdown table: latency (half round trip) and bandwidth per message
size, with the ratios the project's targets are stated in. ``measure`` and
``markdown`` are what benchmarks/report.py calls.

"MPICH tcp" forces MPICH onto sockets the way benchmarks/collectives/osu_collectives.py
does (``TCP_ENVS`` there): ``MPIR_CVAR_NOLOCAL=1`` alone leaves local traffic on UCX's
shared memory. Likewise "fmpi tcp" is fmpi with ``FMPI_SHM=0`` (every
payload over the TCP link, as between Lambda functions), compared with the
raw socket and MPICH tcp; "fmpi" (its default between ranks on one host:
large payloads through shared-memory lanes) is compared with MPICH shm.
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
BACKENDS = ["raw socket", "fmpi tcp", "MPICH tcp", "fmpi", "MPICH shm"]


def _tcp_envs() -> dict[str, dict[str, str]]:
    spec = importlib.util.spec_from_file_location("osu_collectives", HERE.parent / "collectives" / "osu_collectives.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TCP_ENVS


def collect(argv: list[str], env: dict | None = None) -> dict[int, dict]:
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True, timeout=1800).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {r["size"]: r for r in rows}


def measure(max_size: int = 64 << 20, seconds: float = 0.3, mpich_tcp: str = "ofi", repeat: int = 1) -> dict[str, dict[int, dict]]:
    """{backend: {size: {"size", "latency_us", "bandwidth_MBps"}}} for BACKENDS.

    With `repeat` > 1 every backend runs that many times, interleaved (a shared
    machine's noise then hits them alike), and each cell keeps its best run:
    the lowest latency and the highest bandwidth.
    """
    flags = ["--max-size", str(max_size), "--seconds", str(seconds)]
    prog = [sys.executable, str(HERE / "osu_p2p.py"), *flags]
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    commands = {
        "raw socket": ([sys.executable, str(HERE / "raw_socket.py"), *flags], None),
        "fmpi tcp": ([str(BIN / "fmpirun"), "-n", "2", *prog], dict(os.environ, FMPI_SHM="0")),
        "MPICH tcp": ([str(BIN / "mpiexec"), "-n", "2", *prog], dict(clean, **_tcp_envs()[mpich_tcp])),
        "fmpi": ([str(BIN / "fmpirun"), "-n", "2", *prog], None),
        "MPICH shm": ([str(BIN / "mpiexec"), "-n", "2", *prog], clean),
    }
    best: dict[str, dict[int, dict]] = {name: {} for name in commands}
    for _ in range(max(1, repeat)):
        for name, (argv, env) in commands.items():
            for size, row in collect(argv, env).items():
                best[name][size] = _better(best[name].get(size), row)
    return best


def _better(kept: dict | None, new: dict) -> dict:
    """The best of two runs of one size: the lower latency and the higher bandwidth."""
    if kept is None:
        return new
    bandwidths = [b for b in (kept["bandwidth_MBps"], new["bandwidth_MBps"]) if b is not None]
    return {
        "size": new["size"],
        "latency_us": min(kept["latency_us"], new["latency_us"]),
        "bandwidth_MBps": max(bandwidths) if bandwidths else None,
    }


def markdown(runs: dict[str, dict[int, dict]]) -> str:
    names = list(runs)
    raw, ftcp, tcp, fshm, shm = (names.index(n) for n in BACKENDS)
    lines = ["| size | " + " | ".join(f"{n} lat µs" for n in names) + " | fmpi tcp/raw | fmpi tcp/MPICH tcp | fmpi/MPICH shm |"]
    lines.append("|---:|" + "---:|" * (len(names) + 3))
    for size in sorted(runs["fmpi"]):
        lat = [runs[n][size]["latency_us"] for n in names]
        lines.append(
            f"| {size} | " + " | ".join(f"{v:.1f}" for v in lat)
            + f" | {lat[ftcp] / lat[raw]:.2f} | {lat[ftcp] / lat[tcp]:.2f} | {lat[fshm] / lat[shm]:.2f} |"
        )
    lines += ["", "| size | " + " | ".join(f"{n} MB/s" for n in names) + " | fmpi tcp/raw | fmpi/MPICH shm |"]
    lines.append("|---:|" + "---:|" * (len(names) + 2))
    for size in sorted(runs["fmpi"]):
        if not size:
            continue
        bw = [runs[n][size]["bandwidth_MBps"] for n in names]
        lines.append(f"| {size} | " + " | ".join(f"{v:.0f}" for v in bw) + f" | {bw[ftcp] / bw[raw]:.0%} | {bw[fshm] / bw[shm]:.0%} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-size", type=int, default=64 << 20)
    parser.add_argument("--seconds", type=float, default=0.3)
    parser.add_argument("--mpich-tcp", choices=sorted(_tcp_envs()), default="ofi", help="MPICH netmod forced onto TCP")
    parser.add_argument("--repeat", type=int, default=1, help="run every backend this many times, interleaved; keep the best")
    args = parser.parse_args()
    print(markdown(measure(args.max_size, args.seconds, args.mpich_tcp, args.repeat)))


if __name__ == "__main__":
    main()
