#!/usr/bin/env python3
"""MPICH's per-file figures on mpi4py's own test suite, kept as data: the reference the slow stage's
tests/compat/test_mpi4py_suite_stage.py compares fmpi with (fmpi passes >= 90 % of what MPICH passes).

MPICH's numbers do not depend on fmpi, so they are measured once and stored in
benchmarks/compat/mpich_reference.json rather than measured again in every CI run (15 min). Regenerate
(same mpi4py version as mpi4py_suite.MPI4PY_VERSION; MPICH and mpi4py wheels in the venv, about 15 min):

    python benchmarks/compat/mpi4py_suite.py --no-fmpi --json mpich.json
    python benchmarks/compat/mpich_reference.py mpich.json benchmarks/compat/mpich_reference.json

The JSON holds, per N and test file, the runner's counts (run, passed, failed, errors, skipped, hung,
notrun) and the file's status; nothing per test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLUMNS = ("run", "passed", "failed", "errors", "skipped", "hung", "notrun", "status")


def condense(report: dict, source: str) -> dict:
    """A runner report (--no-fmpi --json) -> {meta, columns, files: {N: {file: [counts..., status]}}}."""
    files: dict[str, dict[str, list]] = {}
    for r in report["results"]:
        if r["impl"] != "mpich":
            continue
        files.setdefault(str(r["n"]), {})[r["file"]] = [r["counts"][k] for k in COLUMNS[:-1]] + [r["status"]]
    if not files:
        raise ValueError("the report holds no MPICH result (run the runner with --no-fmpi)")
    meta = report.get("meta", {})
    return {
        "about": "MPICH's per-file counts on mpi4py's own test suite (benchmarks/compat/mpich_reference.py says how to regenerate)",
        "mpi4py_version": meta.get("mpi4py_version"),
        "library": next((r["mpi"].get("library") for r in report["results"] if r.get("mpi")), None),
        "date": meta.get("date"),
        "source": source,
        "columns": list(COLUMNS),
        "files": {n: dict(sorted(per.items())) for n, per in sorted(files.items(), key=lambda kv: int(kv[0]))},
    }


def dumps(ref: dict) -> str:
    """JSON with one line per test file, so that a regenerated reference diffs file by file."""
    head = {k: v for k, v in ref.items() if k != "files"}
    lines = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()] + ['  "files": {']
    ns = list(ref["files"])
    for i, n in enumerate(ns):
        lines.append(f"    {json.dumps(n)}: {{")
        per = ref["files"][n]
        for j, (name, row) in enumerate(per.items()):
            lines.append(f"      {json.dumps(name)}: {json.dumps(row)}" + ("," if j < len(per) - 1 else ""))
        lines.append("    }" + ("," if i < len(ns) - 1 else ""))
    return "\n".join(lines + ["  }", "}"]) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: mpich_reference.py RUNNER_REPORT.json OUT.json", file=sys.stderr)
        return 2
    src, out = Path(argv[0]), Path(argv[1])
    report = json.loads(src.read_text(encoding="utf-8"))
    ref = condense(report, f"mpi4py_suite.py {report.get('meta', {}).get('argv', '')}")
    out.write_text(dumps(ref), encoding="utf-8")
    totals = {n: sum(row[1] for row in per.values()) for n, per in ref["files"].items()}
    print(f"{out}: {sum(len(p) for p in ref['files'].values())} (N, file) rows; passed per N: {totals}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
