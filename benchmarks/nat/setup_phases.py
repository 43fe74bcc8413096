"""Where a punched link's set-up time goes: two ranks behind cone NATs, every system call timed (root).

    sudo .venv/bin/python benchmarks/nat/setup_phases.py [--runs 5] [--delay-us 0]

Builds the NAT lab (tests/natlab) with the relay and two hosts behind cone
NATs (``--delay-us``: the shaped lab's one-way delay on every host, 0: none),
runs ``fmpirun --join`` for both ranks under ``strace -f -ttt`` (network
system calls, process and thread creation), and a program that stamps the
wall clock at its first line, after ``import MPI`` (the rendezvous and the
WORLD), before and after its first message to the other rank. From the
traces it reads, per rank:

- start: exec of fmpirun to exec of the program's Python (fmpirun --join's own start);
- import: the program's first line to ``MPI`` imported (Python, numpy, fmpi, rendezvous);
- request: first send to the first PUNCH frame leaving for the relay
  (``sendto``/``sendmsg`` on the relay socket after the send starts);
- punch: the first ``connect`` to the peer's public address to the first
  successful one, and the number of attempts;
- handshake: that connect to the first bytes read on the punched socket;
- first message: from then to the program's "after".

strace adds tens of µs per system call, so absolute times are inflated; the
shares and the gaps between threads are what to read. Prints one Markdown table.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "benchmarks" / "shaped")]

from lab import Shape, ShapedLab  # noqa: E402

BIN = Path(sys.executable).parent
PROGRAM = textwrap.dedent(
    """
    import time
    t0 = time.time()
    from mpi4py import MPI
    t1 = time.time()
    comm = MPI.COMM_WORLD
    peer = 1 - comm.rank
    t2 = time.time()
    comm.sendrecv(b"x", dest=peer, source=peer)
    t3 = time.time()
    print(f"STAMPS {t0:.6f} {t1:.6f} {t2:.6f} {t3:.6f}", flush=True)
    """
)
_LINE = re.compile(r"^(\d+) +(\d+\.\d+) (\w+)\((.*)$")
_CONNECT = re.compile(r'connect\((\d+), \{sa_family=AF_INET, sin_port=htons\((\d+)\), sin_addr=inet_addr\("([\d.]+)"\)')


def read_trace(path: Path) -> list[tuple[int, float, str, str]]:
    """(tid, wall time, syscall, rest of the line) for every traced call."""
    calls = []
    for line in path.read_text().splitlines():
        m = _LINE.match(line)
        if m:
            calls.append((int(m.group(1)), float(m.group(2)), m.group(3), m.group(3) + "(" + m.group(4)))
    return calls


def phases(calls: list, stamps: list[float], peer_public: str, relay_ip: str) -> dict[str, float]:
    """Seconds per phase for one rank (see the module docstring)."""
    t0, t1, t2, t3 = stamps
    execs = [t for _, t, name, text in calls if name == "execve" and "= 0" in text]
    relay_fds = {m.group(1) for _, _, name, text in calls if name == "connect"
                 for m in [_CONNECT.search(text)] if m and m.group(3) == relay_ip}
    sends = [t for _, t, name, text in calls if name in ("sendto", "sendmsg") and t >= t2
             and any(text.startswith(f"{name}({fd},") for fd in relay_fds)]
    punches = [(t, _CONNECT.search(text).group(1)) for _, t, name, text in calls
               if name == "connect" and t >= t2 and peer_public in text]
    punch_fds = {fd for _, fd in punches}
    # A punch ends when a connect's SO_ERROR reads 0, or the listener accepts the peer (simultaneous open).
    ends = [(t, text.split("(", 1)[1].split(",", 1)[0]) for _, t, name, text in calls if t >= t2 and (
        (name == "getsockopt" and "SO_ERROR, [0]" in text and text.split("(", 1)[1].split(",", 1)[0] in punch_fds)
        or (name == "accept4" and peer_public in text))]
    if name_fd := ends[0] if ends else None:
        linked, fd = name_fd
        if fd not in punch_fds:  # accept4(listener, ...) = new fd
            fd = next(text.rsplit("= ", 1)[1].strip() for _, t, n, text in calls if n == "accept4" and t == linked)
    else:
        linked, fd = t3, None
    first_connect = punches[0][0] if punches else t3
    reads = [t for _, t, name, text in calls if name in ("recvfrom", "recvmsg") and t > linked
             and text.startswith(f"{name}({fd},") and "EAGAIN" not in text]
    handshaken = reads[0] if reads else linked
    return {
        "start": (execs[-1] - execs[0]) if len(execs) > 1 else 0.0,
        "import": t1 - t0,
        "request": (sends[0] - t2) if sends else float("nan"),
        "to punch": first_connect - (sends[0] if sends else t2),
        "punch": linked - first_connect,
        "attempts": float(len(punches)),
        "handshake": handshaken - linked,
        "first message": t3 - handshaken,
        "first send to reply": t3 - t2,
    }


def one_run(lab: ShapedLab, tmp: Path, run: int, trace_calls: bool = True) -> list[dict[str, float]]:
    relay_url = f"tcp://{lab.lab.relay_ip}:7000"
    launcher = lab.lab.popen(lab.lab.RELAY, [str(BIN / "fmpirun"), "-n", "2", "--relay", relay_url, "--print-join",
                                             "--fill-timeout", "60"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    token = job = None
    for line in launcher.stdout:
        m = re.search(r"FMPI_TOKEN=(\S+) fmpirun --join \S+ --job (\S+)", line)
        if m:
            token, job = m.groups()
            break
    program = tmp / "first_message.py"
    program.write_text(PROGRAM)
    ranks = []
    for r, host in enumerate(["c1", "c2"]):
        trace = tmp / f"run{run}.rank{r}.trace"
        strace = ["strace", "-f", "-ttt", "-qq", "-e", "trace=connect,sendto,sendmsg,recvfrom,recvmsg,execve,getsockopt,accept4",
                  "-o", str(trace)] if trace_calls else []
        argv = [*strace, str(BIN / "fmpirun"), "--join", relay_url, "--job", job, "--size", "2", "--rank", str(r),
                "--fill-timeout", "60", sys.executable, str(program)]
        ranks.append((trace, lab.lab.popen(host, argv, env={**os.environ, "FMPI_TOKEN": token}, stdout=subprocess.PIPE, text=True)))
    out = []
    for r, (trace, proc) in enumerate(ranks):
        stdout, _ = proc.communicate(timeout=120)
        stamps = [float(x) for x in next(line for line in stdout.splitlines() if line.startswith("STAMPS")).split()[1:]]
        peer = lab.lab.public_ip("c2" if r == 0 else "c1")
        if trace_calls:
            out.append(phases(read_trace(trace), stamps, peer, lab.lab.relay_ip))
        else:
            out.append({"import": stamps[1] - stamps[0], "first send to reply": stamps[3] - stamps[2]})
    launcher.wait(timeout=30)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--delay-us", type=float, default=0.0, help="one-way delay per host (the shaped lab's), 0: none")
    parser.add_argument("--no-strace", action="store_true", help="time only the program's own stamps (no strace cost)")
    args = parser.parse_args()
    shape = Shape(delay_us=args.delay_us, rate_mbit=0)
    rows: list[dict[str, float]] = []
    with ShapedLab(0, shape, "cone") as lab, tempfile.TemporaryDirectory() as tmp:
        for host in ("c1", "c2"):
            lab.lab.add_host(host, "cone")
            lab.shape_host(host)
        relay = lab.lab.popen(lab.lab.RELAY, [str(BIN / "fmpi-relay"), "--host", "0.0.0.0", "--port", "7000", "--log-level",
                                               "WARNING"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        relay.stdout.readline()
        for run in range(args.runs):
            rows += one_run(lab, Path(tmp), run, trace_calls=not args.no_strace)
            time.sleep(0.2)
    keys = list(rows[0])
    print(f"Punched link set-up, 2 ranks behind cone NATs, {args.delay_us:g} µs one way; medians over {len(rows)} rank-runs "
          f"(ms; strace {'off' if args.no_strace else 'on'}; load {os.getloadavg()[0]:.1f})\n")
    print("| " + " | ".join(keys) + " |")
    print("|" + "---:|" * len(keys))
    print("| " + " | ".join(f"{statistics.median(r[k] for r in rows) * (1 if k == 'attempts' else 1000):.1f}" for k in keys) + " |")


if __name__ == "__main__":
    main()
