"""Every command shown in the docs runs (so the docs cannot rot).

A fenced ``bash`` block preceded by ``<!-- doc-test -->`` is run line by line
from the repository root, with this environment's ``bin`` first on PATH (so
``fmpirun``, ``fmpi-relay`` and ``python`` are the ones under test); every
line must exit 0. ``<!-- doc-test: slow -->`` blocks run in the slow stage, in
a fresh clone (they install things); ``<!-- doc-test: long -->`` blocks run in
the slow stage as the default ones do (a command that takes minutes).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests_support import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "apps").glob("*.md"))]
BLOCK = re.compile(r"<!-- doc-test(?:: (?P<kind>slow|long))? -->\s*```(?:bash|console|sh)\n(?P<body>.*?)```", re.S)


def _blocks(kind: str | None) -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for m in BLOCK.finditer(doc.read_text()):
            if m.group("kind") == kind:
                for line in m.group("body").splitlines():
                    command = line.split(" #", 1)[0].strip()
                    if command and not command.startswith("#"):
                        found.append((f"{doc.relative_to(REPO)}: {command}", command))
    return found


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


def test_docs_have_tested_commands():
    assert len(_blocks(None)) >= 3


@pytest.mark.parametrize("label, command", _blocks(None), ids=[label for label, _ in _blocks(None)])
def test_doc_command_runs(label, command):
    _run_here(label, command)


@pytest.mark.slow
@pytest.mark.serial  # (the one long block runs test_lambda_checkpoint.py, whose launches race a 10 s function timeout)
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("label, command", _blocks("long"), ids=[label for label, _ in _blocks("long")])
def test_long_doc_command_runs(label, command):
    _run_here(label, command, timeout=1500)


def _run_here(label: str, command: str, timeout: float = 300) -> None:
    result = subprocess.run(["bash", "-c", command], cwd=REPO, env=_env(), capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"{label}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("label, command", _blocks("slow"), ids=[label for label, _ in _blocks("slow")])
def test_slow_doc_command_runs_in_a_fresh_clone(label, command, tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    result = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, f"{label}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
