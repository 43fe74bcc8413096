"""The package's shape: which folder may import which, read from the source (ast), so it cannot rot silently.

Layers only talk down. Each entry of ``ALLOWED`` lists the packages a
package may import (besides itself and the leaf modules every layer may use).
docs/architecture.md draws the same table; a new edge is a design decision:
change both, with the reason in the commit.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests_support import REPO

SRC = REPO / "src" / "fmpi"

# Leaf modules and packages every layer may import: they import nothing of fmpi's but each other.
LEAVES = {"__init__", "util", "settings"}

ALLOWED: dict[str, set[str]] = {
    # the program's view
    "MPI": {"api"},
    # what a program calls besides MPI: checkpoints (over the program's own mpi4py, imported at run time)
    "checkpoint": {"wire"},
    "api": {"collectives", "transport", "rank", "wire"},
    "collectives": {"transport", "wire"},
    # what runs inside a rank, and what hosts the program on Lambda
    "lambda_runtime": {"api", "rank", "rendezvous", "wire"},
    "rank": {"transport", "rendezvous", "dso_client", "redis_relay", "natpunch", "wire"},
    # carriers and clients of the relays
    "dso_client": {"rendezvous", "wire"},
    "redis_relay": {"rendezvous", "wire"},
    "transport": {"natpunch", "wire"},
    "rendezvous": {"natpunch", "wire"},
    "natpunch": set(),
    "wire": set(),
    "util": set(),
    "settings": {"util"},
    # programs: fmpirun, fmpi-relay, python -m fmpi
    "launcher": {"lambda_runtime", "rank", "rendezvous", "relay_server", "dso_client", "wire", "checkpoint"},
    "lambda_local": {"lambda_runtime"},  # fmpi-lambda-local: the runtimes' table, nothing else of fmpi's
    "relay_server": {"wire"},
    "__main__": {"launcher"},
}

# Edges that exist today and are on their way out (issue 23); the list may only shrink.
KNOWN: set[tuple[str, str]] = set()


def _package(rel: Path) -> str:
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported_packages(path: Path) -> set[str]:
    """Top-level fmpi packages `path` imports, at module level or inside functions."""
    rel = path.relative_to(SRC)
    parts = list(rel.with_suffix("").parts)
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                target = parts[: len(parts) - node.level] + (node.module.split(".") if node.module else [])
                names = target or [alias.name for alias in node.names]
                out.update(names[:1] if target else names)
            elif node.module and node.module.split(".")[0] == "fmpi":
                target = node.module.split(".")[1:]
                out.update(target[:1] if target else [alias.name for alias in node.names])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("fmpi."))
    # `from .. import __version__` names the root package's attributes: the root package itself.
    return {p if (SRC / p).is_dir() or (SRC / f"{p}.py").exists() else "__init__" for p in out}


def edges() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if "shim" in rel.parts:  # the mpi4py stand-in imports fmpi.MPI, as a user program does
            continue
        source = _package(rel)
        for target in _imported_packages(path):
            if target != source:
                found.setdefault((source, target), []).append(str(rel))
    return found


def test_every_package_has_a_layer():
    packages = {_package(p.relative_to(SRC)) for p in SRC.rglob("*.py")} - {"__init__"}
    assert packages <= set(ALLOWED) | LEAVES, f"packages without a row in ALLOWED: {packages - set(ALLOWED) - LEAVES}"


def test_layers_only_talk_down():
    bad = {
        edge: files for edge, files in edges().items()
        if edge[1] not in LEAVES and edge[1] not in ALLOWED.get(edge[0], set()) and edge not in KNOWN
    }
    assert not bad, "imports outside the allowed layers:\n" + "\n".join(
        f"  {a} -> {b}: {', '.join(files)}" for (a, b), files in sorted(bad.items())
    )


def test_known_exceptions_still_exist():
    """A KNOWN edge that is gone must leave the list, so it cannot come back unnoticed."""
    present = set(edges())
    assert KNOWN <= present, f"remove from KNOWN (no longer imported): {sorted(KNOWN - present)}"


def test_the_allowed_table_has_no_cycle():
    seen: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        if seen.get(node) == 1:
            raise AssertionError("cycle: " + " -> ".join(path + [node]))
        if seen.get(node) == 2:
            return
        seen[node] = 1
        for nxt in ALLOWED.get(node, set()):
            visit(nxt, path + [node])
        seen[node] = 2

    for package in ALLOWED:
        visit(package, [])


def test_the_check_sees_an_edge_that_breaks_the_layers(tmp_path, monkeypatch):
    """The parser must catch a relative import that climbs out of its package (and one inside a function)."""
    fake = tmp_path / "fmpi"
    (fake / "wire").mkdir(parents=True)
    (fake / "api").mkdir()
    (fake / "api" / "x.py").write_text("")
    (fake / "wire" / "y.py").write_text("def f():\n    from ..api import x\n")
    monkeypatch.setattr(__import__(__name__), "SRC", fake)
    assert ("wire", "api") in edges()


def test_the_architecture_doc_draws_the_same_table():
    """docs/architecture.md's table of packages and the imports they may make is this ALLOWED, row for row."""
    drawn: dict[str, set[str]] = {}
    text = (REPO / "docs" / "architecture.md").read_text()
    table = text[text.index("| package | may import |"):].split("\n\n")[0]
    for line in table.splitlines()[2:]:
        names, allowed = (cell.strip() for cell in line.strip("|").split("|"))
        for name in names.replace("`", "").split(","):
            drawn[name.strip()] = set() if allowed == "—" else {a.strip() for a in allowed.split(",")}
    wanted = {k: v for k, v in ALLOWED.items() if k not in LEAVES and k != "__main__"}
    assert drawn == {k: v - LEAVES for k, v in wanted.items()}
