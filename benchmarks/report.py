"""The benchmark report in one command: p2p, collectives and apps, fmpi against MPICH in the same run.

    python benchmarks/report.py [--quick] [--out DIR]

Writes DIR/report.md (default benchmarks/results/) with Markdown tables and these plots:

- p2p_latency.png: half round trip vs message size (fmpi, raw socket, MPICH tcp, MPICH shm);
- p2p_bandwidth.png: bandwidth vs size, with the raw-socket ceiling and the 80 % target line;
- collectives.png: fmpi / MPICH latency ratio per collective and size at each N;
- apps.png: the apps' wall times under fmpirun and mpiexec;
- netlab.png: on a Lambda-shaped network of namespaces (benchmarks/netlab.py; needs root), time per
  call against N for each collective, fmpi beside MPICH and the lower bound (``--netlab-json FILE``
  takes the figures of an earlier ``netlab.py --json FILE`` run instead, ``--no-netlab`` skips it).

The report opens with issue 8's targets, each measured in the run: small-message latency
against the raw socket, large-message bandwidth against it, and `fmpirun -n 4` hello world
launch to exit. It runs the existing scripts (benchmarks/p2p/run.py,
benchmarks/collectives/osu_collectives.py), docs/examples/hello.py and the apps/ templates;
``--quick`` (a few minutes) uses fewer sizes, iterations and smaller problems. Numbers from a
busy machine are noisy: rerun on a quiet one before quoting them.
Needs matplotlib (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BIN = Path(sys.executable).parent
MiB = 1 << 20


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


p2p = _load("p2p_run", HERE / "p2p" / "run.py")
osu = _load("osu_collectives", HERE / "collectives" / "osu_collectives.py")

# App runs: (app, full-size flags, quick flags). Result lines are checked by tests/apps; here only the time.
APPS = [
    ("pi", ["--samples", "20000000"], ["--samples", "2000000"]),
    ("kmeans", ["--points", "200000"], ["--points", "20000", "--iterations", "5"]),
    ("logreg", ["--points", "200000"], ["--points", "20000", "--iterations", "20"]),
    ("jacobi", ["--nx", "512", "--ny", "512", "--iterations", "500"], ["--nx", "128", "--ny", "128", "--iterations", "100"]),
    ("mlp", ["--epochs", "3"], ["--train", "8192", "--test", "1024", "--epochs", "1"]),
    ("samplesort", ["--keys", "2000000"], ["--keys", "200000"]),
]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ measurements
def run_p2p(quick: bool) -> dict:
    max_size, seconds, repeat = (64 * MiB, 0.02, 1) if quick else (64 * MiB, 0.3, 3)
    log(f"p2p: 0 B .. {max_size // MiB} MiB, {seconds} s per size and test, best of {repeat}")
    return p2p.measure(max_size, seconds, repeat=repeat)


def run_collectives(quick: bool, ns: list[int]) -> tuple[dict, dict[int, str], object]:
    """({N: {backend: {cell: µs}}}, {N: the note on cells whose runs lay far apart}, the osu arguments)."""
    argv = ["--ns", ",".join(map(str, ns))]
    argv += ["--sizes", "8,64K,1M,4M", "--scale", "0.1", "--max-block", "1M"] if quick else ["--repeat", "3"]
    args = osu.parse_args(argv)
    results, spreads = {}, {}
    for n in ns:
        log(f"collectives: N={n}")
        samples = osu.measure(args, n)
        results[n] = osu.summarize(samples, args.stat)
        spreads[n] = osu.spread_note(samples)
    return results, spreads, args


def _app_time(stdout: str) -> float | None:
    m = re.search(r"^time ([0-9.]+) s", stdout, re.M)
    return float(m.group(1)) if m else None


def _without_pythonpath(env: dict[str, str] | os._Environ) -> dict[str, str]:
    """The environment for mpiexec runs: fmpi's shim on PYTHONPATH would turn mpi4py into fmpi."""
    return {k: v for k, v in env.items() if k != "PYTHONPATH"}


def run_apps(quick: bool, n: int) -> list[dict]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    clean = _without_pythonpath(env)
    rows = []
    for app, full, small in APPS:
        row = {"app": app, "n": n}
        for name, launcher, launch_env in (("fmpi", "fmpirun", env), ("mpich", "mpiexec", clean)):
            argv = [str(BIN / launcher), "-n", str(n), sys.executable, str(REPO / "apps" / f"{app}.py"), *(small if quick else full)]
            started = time.monotonic()
            proc = subprocess.run(argv, env=launch_env, capture_output=True, text=True, timeout=1800)
            wall = time.monotonic() - started
            ok = proc.returncode == 0
            if not ok:
                log(f"apps: {app} under {launcher} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
            row[f"{name}_wall"] = wall if ok else None
            row[f"{name}_compute"] = _app_time(proc.stdout) if ok else None
        log(f"apps: {app} N={n}: fmpirun {row['fmpi_wall'] or float('nan'):.2f} s, mpiexec {row['mpich_wall'] or float('nan'):.2f} s")
        rows.append(row)
    return rows


HELLO = REPO / "docs" / "examples" / "hello.py"
HELLO_RANKS = 4


def run_hello(times: int) -> dict[str, list[float]]:
    """Wall seconds of `fmpirun -n 4 python docs/examples/hello.py`, launch to exit, `times` runs (and mpiexec's)."""
    clean = _without_pythonpath(os.environ)
    walls: dict[str, list[float]] = {"fmpi": [], "mpich": []}
    for _ in range(times):
        for name, launcher, env in (("fmpi", "fmpirun", None), ("mpich", "mpiexec", clean)):
            argv = [str(BIN / launcher), "-n", str(HELLO_RANKS), sys.executable, str(HELLO)]
            started = time.monotonic()
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
            if proc.returncode != 0:
                raise SystemExit(f"hello world under {launcher} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
            walls[name].append(time.monotonic() - started)
    log(f"hello N={HELLO_RANKS}: fmpirun median {statistics.median(walls['fmpi']):.2f} s, mpiexec median {statistics.median(walls['mpich']):.2f} s")
    return walls


# ------------------------------------------------------------------ plots
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _size_label(n: float, _pos=None) -> str:
    for unit, scale in (("MiB", MiB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:g} B"


def _size_axis(ax, largest: int) -> None:
    """A log2 x axis with ticks at 1 B, 32 B, 1 KiB, 32 KiB, 1 MiB, 32 MiB."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_xscale("log", base=2)
    ax.set_xticks([1 << k for k in range(0, largest.bit_length(), 5)])
    ax.xaxis.set_major_formatter(FuncFormatter(_size_label))
    ax.xaxis.set_minor_formatter(NullFormatter())


def plot_p2p(runs: dict, out: Path) -> list[str]:
    plt = _plt()

    def curve(ax, rows: dict, column: str, scale: float = 1.0, **style) -> None:
        sizes = sorted(s for s in rows if s > 0)  # 0 B has no place on a log axis
        ax.plot(sizes, [scale * rows[s][column] for s in sizes], **style)

    def save(fig, ax, name: str, ylabel: str, title: str) -> str:
        ax.set(yscale="log", xlabel="message size", ylabel=ylabel, title=title)
        _size_axis(ax, max(runs["fmpi"]))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        return name

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, rows in runs.items():
        curve(ax, rows, "latency_us", marker="o", ms=3, label=name)
    files = [save(fig, ax, "p2p_latency.png", "latency, half round trip (µs)", "Point-to-point latency")]

    fig, ax = plt.subplots(figsize=(8, 5))
    raw = runs["raw socket"]
    curve(ax, raw, "bandwidth_MBps", color="black", lw=2.5, label="raw socket (ceiling)")
    curve(ax, raw, "bandwidth_MBps", scale=0.8, color="black", ls="--", lw=1, label="80 % of raw (target)")
    for name, rows in runs.items():
        if name != "raw socket":
            curve(ax, rows, "bandwidth_MBps", marker="o", ms=3, label=name)
    files.append(save(fig, ax, "p2p_bandwidth.png", "bandwidth (MB/s)", "Point-to-point bandwidth"))
    return files


def plot_collectives(results: dict, out: Path) -> str:
    plt = _plt()
    colls = osu.COLLECTIVES
    fig, axes = plt.subplots(1, len(colls), figsize=(4 * len(colls), 4), squeeze=False)
    colors = {n: f"C{i}" for i, n in enumerate(sorted(results))}
    # each fmpi configuration against its MPICH counterpart (osu_collectives.BACKENDS)
    refs = (("fmpi-tcp", "mpich-tcp", "-", "tcp"), ("fmpi", "mpich-shm", ":", "shm"))
    for ax, coll in zip(axes[0], colls):
        if coll == "barrier":  # no payload: the ratio against N
            for mine, ref, style, label in refs:
                pts = [(n, r[mine][k] / r[ref][k]) for n, r in sorted(results.items())
                       for k in r[mine] if k[0] == "barrier" and r[ref].get(k)]
                if pts:
                    ax.plot(*zip(*pts), style, color="black", marker="s", ms=5, label=f"/ {label}")
            ax.set(xlabel="N (ranks)", xticks=sorted(results))
            ax.legend(fontsize="small")
        else:
            for n, per_backend in sorted(results.items()):
                for mine, ref, style, label in refs:
                    fm = per_backend[mine]
                    keys = sorted(k for k in fm if k[0] == coll and per_backend[ref].get(k))
                    if keys:
                        ax.plot([k[1] for k in keys], [fm[k] / per_backend[ref][k] for k in keys], style,
                                color=colors[n], marker="o", ms=4, label=f"N={n} {label}")
            _size_axis(ax, max(k[1] for r in results.values() for k in r["fmpi"]) or 1)
            ax.set(xlabel="bytes per rank")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set(yscale="log", title=coll)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("fmpi latency / MPICH latency (tcp: both over TCP; shm: both with shared memory)")
    handles, labels = axes[0][1].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize="small")
    fig.suptitle("Collectives: fmpi relative to MPICH (below 1: fmpi faster)")
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    fig.savefig(out / "collectives.png", dpi=100)
    plt.close(fig)
    return "collectives.png"


def plot_apps(rows: list[dict], out: Path) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["fmpi_wall"] or 0 for r in rows], width=0.4, label="fmpirun")
    ax.bar([x + 0.2 for x in xs], [r["mpich_wall"] or 0 for r in rows], width=0.4, label="mpiexec (MPICH)")
    ax.set_xticks(list(xs), [r["app"] for r in rows])
    ax.set(ylabel="wall time (s)", title=f"Apps at N={rows[0]['n'] if rows else '?'}: launch to exit")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "apps.png", dpi=110)
    plt.close(fig)
    return "apps.png"


# ------------------------------------------------------------------ the report
def _fmt(v: float | None, digits: int = 2) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or not b else f"{a / b:.2f}×"


def targets(runs: dict, hello: dict[str, list[float]]) -> list[str]:
    """Issue 8's three performance targets, each measured in this run, with a verdict."""
    wall = statistics.median(hello["fmpi"])
    return [
        *p2p_summary(runs),
        f"| `fmpirun -n {HELLO_RANKS}` hello world, launch to exit, ≤ 1 s (median of {len(hello['fmpi'])}; "
        f"mpiexec {statistics.median(hello['mpich']):.2f} s) | {wall:.2f} s | {'yes' if wall <= 1.0 else 'no'} |",
    ]


def p2p_summary(runs: dict) -> list[str]:
    raw, fm = runs["raw socket"], runs["fmpi tcp"]  # (both over TCP)
    small = [s for s in (0, 1, 8) if s in raw and s in fm]
    big = max(s for s in fm if s in raw)
    lat_ratio = max(fm[s]["latency_us"] / raw[s]["latency_us"] for s in small)
    bw_frac = fm[big]["bandwidth_MBps"] / raw[big]["bandwidth_MBps"]
    return [
        "| target | measured | met |",
        "|---|---:|:---:|",
        f"| small-message half round trip ≤ 2× raw socket ({', '.join(f'{s} B' for s in small)}) | {lat_ratio:.2f}× | {'yes' if lat_ratio <= 2 else 'no'} |",
        f"| large-message bandwidth ≥ 80 % of raw socket ({_size_label(big)}) | {bw_frac:.0%} | {'yes' if bw_frac >= 0.8 else 'no'} |",
    ]


def apps_table(rows: list[dict]) -> list[str]:
    lines = [
        "| app | N | fmpirun wall (s) | mpiexec wall (s) | fmpi/MPICH wall | fmpi compute (s) | MPICH compute (s) | fmpi/MPICH compute |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['app']} | {r['n']} | {_fmt(r['fmpi_wall'])} | {_fmt(r['mpich_wall'])} | {_ratio(r['fmpi_wall'], r['mpich_wall'])} "
            f"| {_fmt(r['fmpi_compute'], 3)} | {_fmt(r['mpich_compute'], 3)} | {_ratio(r['fmpi_compute'], r['mpich_compute'])} |"
        )
    return lines


def _versions() -> str:
    def version(pkg: str) -> str:
        try:
            from importlib.metadata import version as v

            return v(pkg)
        except Exception:  # noqa: BLE001 - informational only
            return "?"

    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        rev = ""
    return (
        f"fmpi {version('fmpi')} (git {rev or '?'}), mpi4py {version('mpi4py')}, MPICH wheel {version('mpich')}, "
        f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes, fewer iterations, small app problems (a few minutes)")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="output directory (default benchmarks/results, ignored by git)")
    parser.add_argument("--ns", default="2,4,8", help="communicator sizes for the collectives (default 2,4,8)")
    parser.add_argument("--app-ranks", type=int, default=4, help="ranks for the app runs (default 4)")
    parser.add_argument("--netlab-ns", help="hosts of the shaped-lab section (default 2,4,8; --quick 2,4)")
    parser.add_argument("--netlab-json", help="the shaped-lab section from this netlab.py --json file")
    parser.add_argument("--no-netlab", action="store_true", help="leave the shaped-lab section out")
    args = parser.parse_args(argv)
    ns = [int(x) for x in args.ns.split(",")]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    runs = run_p2p(args.quick)
    coll_results, coll_spreads, coll_args = run_collectives(args.quick, ns)
    app_rows = run_apps(args.quick, args.app_ranks)
    hello = run_hello(3 if args.quick else 7)
    shaped_lab = _load("report_section", HERE / "shaped" / "report_section.py")
    shaped = shaped_lab.figures(args.netlab_json, args.no_netlab, args.netlab_ns, args.quick)

    p2p_plots = plot_p2p(runs, out)
    coll_plot = plot_collectives(coll_results, out)
    apps_plot = plot_apps(app_rows, out)

    tcp_env = " ".join(f"{k}={v}" for k, v in osu.TCP_ENVS["ofi"].items())
    md = [
        "# fmpi benchmark report",
        "",
        f"{datetime.datetime.now().isoformat(timespec='seconds')}, {'quick' if args.quick else 'full'} run "
        f"(`python benchmarks/report.py{' --quick' if args.quick else ''}`), {time.monotonic() - started:.0f} s.",
        f"{_versions()}.",
        "",
        "Every number comes from this one run; fmpi and MPICH ran one after the other on the same machine.",
        f"\"MPICH tcp\" is mpiexec with `{tcp_env}` (sockets only); \"MPICH shm\" is MPICH's default",
        "(shared memory between local ranks). \"fmpi tcp\" is fmpirun with `FMPI_SHM=0` (every payload over",
        "TCP, as between Lambda functions); \"fmpi\" is its default, which moves large payloads between",
        "ranks on one host through shared-memory lanes. Each fmpi configuration is compared with its",
        "MPICH counterpart. Timings on a shared machine are noisy.",
        "",
        "## Targets",
        "",
        *targets(runs, hello),
        "",
        "## Point-to-point",
        "",
        "OSU-style, 2 ranks: latency is half a `Send`/`Recv` round trip; bandwidth streams a window of",
        "`Isend`s answered by one ack. \"raw socket\" is the same pattern over a bare Python TCP socket pair",
        "on loopback, each process pinned to a CPU of its own as ranks are, the ceiling for any Python",
        "message layer (pinned to one CPU, its small-message latency is ~4x lower on a virtual machine:",
        "`benchmarks/p2p/raw_socket.py --same-cpu`).",
        "",
        *(f"![{name}]({name})" for name in p2p_plots),
        "",
        p2p.markdown(runs),
        "",
        "## Collectives",
        "",
        "OSU-style mean latency per call, averaged over ranks; sizes are bytes per rank. The ratio columns",
        "are fmpi's latency over MPICH's, shared memory against shared memory and TCP against TCP",
        "(below 1: fmpi is faster).",
        "",
        f"![collective ratios]({coll_plot})",
        "",
    ]
    for n in ns:
        md += [osu.table(n, coll_results[n], coll_args), ""]
        if coll_spreads[n]:
            md += [coll_spreads[n], ""]
    if osu.NOTES:
        md += ["fmpi links: " + "; ".join(osu.NOTES), ""]
    md += [
        "## Applications",
        "",
        f"The apps/ templates at N={args.app_ranks} under `fmpirun` and under `mpiexec` (MPICH's defaults). Wall",
        "time is launch to exit (start-up included); compute time is the app's own `time` line.",
        "",
        *apps_table(app_rows),
        "",
        f"![app wall times]({apps_plot})",
        "",
    ]
    if shaped:
        md += shaped_lab.section(shaped, out)
    (out / "report.md").write_text("\n".join(md))
    log(f"wrote {out / 'report.md'} and {len(p2p_plots) + 2} plots in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
