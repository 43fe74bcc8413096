"""Helpers for the job-level collective tests: run a program from programs/ and read its verdicts.

Each program checks many cases inside one job and prints ``FAIL <what>`` per
wrong case and, on rank 0, ``CASES <n>`` with the number it checked (so a
program that silently checks nothing fails too).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests_support import verdict

PROGRAMS = Path(__file__).parent / "programs"
NS = [1, 2, 3, 4, 5, 7, 8]


@pytest.fixture
def check(fmpi):
    """check(program, n, *args, env={...}) -> number of cases; runs under fmpirun and asserts no FAIL."""

    def run(program: str, n: int, *args: str, env: dict | None = None, timeout: float = 300) -> int:
        full_env = dict(os.environ)
        full_env.update(env or {})
        result = fmpi(n, PROGRAMS / program, *args, timeout=timeout, env=full_env)
        return verdict(result, f"{program} -n {n}")

    return run


@pytest.fixture
def both(fmpi, mpich):
    """both(program, n) -> (fmpi stdout, mpich stdout); both must exit 0."""

    def run(program: str, n: int, *args: str) -> tuple[str, str]:
        ours = fmpi(n, PROGRAMS / program, *args)
        assert ours.returncode == 0, ours.stderr[-4000:]
        ref = mpich(n, PROGRAMS / program, *args)
        assert ref.returncode == 0, ref.stderr[-4000:]
        return ours.stdout, ref.stdout

    return run
