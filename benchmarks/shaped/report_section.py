"""The shaped-lab section of benchmarks/report.py: time against N per collective, fmpi beside MPICH and the bound.

``section(report, out)`` takes what ``netlab.run`` returned (or a ``--json``
file of ``netlab.py``), draws ``netlab.png`` into `out` and returns the
section's Markdown lines.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bounds import published  # noqa: E402

MiB = 1 << 20


def figures(json_path: str | None, skip: bool, ns: str | None, quick: bool) -> dict | None:
    """The shaped lab's figures: from `json_path`, or measured now (N = `ns`) where root can build the lab."""
    if json_path:
        return json.loads(Path(json_path).read_text())
    spec = importlib.util.spec_from_file_location("netlab", Path(__file__).resolve().parents[1] / "netlab.py")
    netlab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(netlab)
    ok, reason = netlab.natlab_available()
    if skip or not ok:
        print(f"shaped lab: skipped ({'--no-netlab' if ok else reason})", file=sys.stderr)
        return None
    lab_args = ["--ns", ns or ("2,4" if quick else "2,4,8"), *(["--quick"] if quick else ["--repeat", "3"])]
    print(f"shaped lab: netlab.py {' '.join(lab_args)}", file=sys.stderr, flush=True)
    return netlab.run(netlab.parse_args(lab_args), echo=False)


def _label(coll: str, nbytes: int) -> str:
    if coll == "barrier":
        return "barrier"
    return f"{coll} {nbytes // MiB} MiB" if nbytes >= MiB else f"{coll} {nbytes} B"


def _by_cell(report: dict) -> dict[tuple[str, int], list[dict]]:
    cells: dict[tuple[str, int], list[dict]] = {}
    for c in report["cells"]:
        cells.setdefault((c["coll"], c["bytes"]), []).append(c)
    return {k: sorted(v, key=lambda c: c["n"]) for k, v in sorted(cells.items())}


def plot(report: dict, out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    cells = _by_cell(report)
    cols = 4
    rows = (len(cells) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.4 * rows), squeeze=False)
    for ax, ((coll, nbytes), points) in zip(axes.flat, cells.items()):
        ns = [c["n"] for c in points]
        for key, style, label in (("fmpi_us", "o-", "fmpi"), ("mpich_us", "s--", "MPICH"), ("bound_us", "k:", "lower bound")):
            pts = [(c["n"], c[key] / 1000) for c in points if c.get(key)]
            if pts:
                ax.plot(*zip(*pts), style, ms=4, label=label)
        if (coll, nbytes) == ("allreduce", 8):
            for n in ns:
                for text in published(n):
                    ax.plot([n], [float(text.split()[-2])], "r^", ms=6)
        ax.set(xscale="log", yscale="log", title=_label(coll, nbytes), xlabel="N (hosts)", ylabel="ms per call")
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(cells):]:
        ax.axis("off")
    axes[0][0].legend(fontsize="small")
    fig.suptitle(f"Shaped network ({report['shape']}): time per call against N (red: published real-Lambda figures)")
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(out / "netlab.png", dpi=100)
    plt.close(fig)
    return "netlab.png"


def fmt_us(us: float | None) -> str:
    if us is None:
        return "—"
    return f"{us:,.0f} µs" if us < 10_000 else f"{us / 1000:,.1f} ms"


def ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or not b else f"{a / b:.2f}×"


def section(report: dict, out: Path) -> list[str]:
    picture = plot(report, out)
    md = [
        "## Collectives on a Lambda-shaped network",
        "",
        f"`benchmarks/netlab.py`: every rank, and the relay, in a network namespace of its own with {report['shape']}",
        "per host and direction (benchmarks/README.md says what that models and what not). fmpi's ranks link",
        "across it as Lambda functions would; MPICH's run on the same hosts (hydra through `ip netns exec`, OFI tcp).",
        "Cells are medians of the runs, in ms or µs per call; the bound is max(α·⌈log2 N⌉, the bytes each",
        "rank's link must carry × β). All hosts share this machine's "
        f"{report['cpus']} CPUs (load average {report['load']:.1f} at the start, {report.get('load_end', 0):.1f} at the end).",
        *([f"A bare TCP round trip between two of the hosts took {report['probe']['rtt_us']['median']:.0f} µs (median) in this run:",
           f"the lab's α was {report['alpha_lab'] * 1e6:.0f} µs; the last ratio uses it."] if "probe" in report else []),
        "",
        f"![time against N]({picture})",
        "",
        "| N | collective | fmpi | MPICH | fmpi / MPICH | bound | fmpi / bound | fmpi / bound at the lab's α | published (real Lambda) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for (coll, nbytes), points in _by_cell(report).items():
        for c in points:
            pub = ", ".join(published(c["n"])) if (coll, nbytes) == ("allreduce", 8) else ""
            md.append(f"| {c['n']} | {_label(coll, nbytes)} | {fmt_us(c.get('fmpi_us'))} | {fmt_us(c.get('mpich_us'))} "
                      f"| {ratio(c.get('fmpi_us'), c.get('mpich_us'))} | {fmt_us(c['bound_us'])} "
                      f"| {ratio(c.get('fmpi_us'), c['bound_us'])} | {ratio(c.get('fmpi_us'), c.get('lab_bound_us'))} | {pub} |")
    return md + [""]
