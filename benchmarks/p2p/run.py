"""Point-to-point report: fmpi vs a bare Python socket and vs MPICH (TCP and shared memory), one run.

    python benchmarks/p2p/run.py [--max-size BYTES] [--seconds S]

Prints a Markdown table: latency (half round trip) and bandwidth per message
size, with the ratios the project's targets are stated in.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent


def collect(argv: list[str], env: dict | None = None) -> dict[int, dict]:
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True, timeout=1800).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {r["size"]: r for r in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-size", type=int, default=64 << 20)
    parser.add_argument("--seconds", type=float, default=0.3)
    args = parser.parse_args()
    flags = ["--max-size", str(args.max_size), "--seconds", str(args.seconds)]
    prog = [sys.executable, str(HERE / "osu_p2p.py"), *flags]
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    runs = {
        "raw socket": collect([sys.executable, str(HERE / "raw_socket.py"), *flags]),
        "fmpi": collect([str(BIN / "fmpirun"), "-n", "2", *prog]),
        "MPICH tcp": collect([str(BIN / "mpiexec"), "-n", "2", *prog], dict(clean, MPIR_CVAR_NOLOCAL="1")),
        "MPICH shm": collect([str(BIN / "mpiexec"), "-n", "2", *prog], clean),
    }
    names = list(runs)
    print("| size | " + " | ".join(f"{n} lat µs" for n in names) + " | fmpi/raw | fmpi/MPICH tcp |")
    print("|---:|" + "---:|" * (len(names) + 2))
    for size in sorted(runs["fmpi"]):
        lat = [runs[n][size]["latency_us"] for n in names]
        print(f"| {size} | " + " | ".join(f"{v:.1f}" for v in lat) + f" | {lat[1] / lat[0]:.2f} | {lat[1] / lat[2]:.2f} |")
    print()
    print("| size | " + " | ".join(f"{n} MB/s" for n in names) + " | fmpi/raw |")
    print("|---:|" + "---:|" * (len(names) + 1))
    for size in sorted(runs["fmpi"]):
        if not size:
            continue
        bw = [runs[n][size]["bandwidth_MBps"] for n in names]
        print(f"| {size} | " + " | ".join(f"{v:.0f}" for v in bw) + f" | {bw[1] / bw[0]:.0%} |")


if __name__ == "__main__":
    main()
