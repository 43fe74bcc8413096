"""Every module of the package says its job in an opening docstring and stays small: at most 400 lines per
module and 80 per function, so that a newcomer can read any one part in a sitting (issue 23)."""

from __future__ import annotations

import ast

from tests_support import REPO

SRC = REPO / "src" / "fmpi"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def _oversized(text: str, name: str) -> list[str]:
    """What in one module's source breaks the limits (the module itself, or its functions)."""
    tree = ast.parse(text)
    found = [] if ast.get_docstring(tree) or not text.strip() else [f"{name}: no opening docstring"]
    if len(text.splitlines()) > MAX_MODULE_LINES:
        found.append(f"{name}: {len(text.splitlines())} lines")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if lines > MAX_FUNCTION_LINES:
                found.append(f"{name}.{node.name}: {lines} lines")
    return found


def test_the_check_sees_a_long_function_a_long_module_and_a_missing_docstring():
    long_function = '"""doc"""\ndef f():\n' + "    x = 1\n" * MAX_FUNCTION_LINES
    assert _oversized(long_function, "m") == [f"m.f: {MAX_FUNCTION_LINES + 1} lines"]
    long_module = '"""doc"""\n' + "x = 1\n" * MAX_MODULE_LINES
    assert _oversized(long_module, "m") == [f"m: {MAX_MODULE_LINES + 1} lines"]
    assert _oversized("x = 1\n", "m") == ["m: no opening docstring"]


def test_every_module_says_its_job_and_stays_small():
    paths = sorted(SRC.rglob("*.py"))
    assert len(paths) > 100  # the whole package, not an empty folder
    found = [f for path in paths for f in _oversized(path.read_text(), str(path.relative_to(SRC)))]
    assert not found, found
