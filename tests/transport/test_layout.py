"""The transport package's shape: parts that import each other without cycles (sizes: tests/test_source_size.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests_support import REPO

ROOT = REPO / "src" / "fmpi" / "transport"


def _modules() -> dict[str, Path]:
    """fmpi.transport.x.y -> its file."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The transport modules `name` imports (relative imports, which are the only ones inside the package)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
            for candidate in [target, *(f"{target}.{alias.name}" for alias in node.names)]:
                if candidate in modules and candidate != name:
                    found.add(candidate)
    return found


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt, path)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_transport_modules_import_each_other_without_cycles():
    modules = _modules()
    assert "fmpi.transport.engine" in modules and "fmpi.transport.links.linkup" in modules
    edges = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "fmpi.transport.core" in edges["fmpi.transport.links.linkup"]  # (the finder sees relative imports)
    assert _cycle(edges) is None
