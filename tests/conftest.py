"""Shared fixtures: run real fmpirun jobs and real MPICH (mpiexec + mpi4py) jobs on the same program."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests_support import fmpirun_argv, free_port

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def lines(self) -> list[str]:
        return self.stdout.splitlines()

    def sorted_lines(self) -> list[str]:
        return sorted(self.stdout.splitlines())


def _script(tmp_path: Path, source: str, name: str = "prog.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def run_fmpi(n: int, script: Path, *args: str, extra: tuple[str, ...] = (), timeout: float = 120, env=None) -> Run:
    proc = subprocess.run(
        fmpirun_argv("-n", str(n), *extra, sys.executable, str(script), *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def run_mpich(n: int, script: Path, *args: str, timeout: float = 120) -> Run:
    """The reference: the same program under real MPICH + mpi4py (from the package index)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["MPIR_CVAR_NOLOCAL"] = env.get("MPIR_CVAR_NOLOCAL", "0")
    proc = subprocess.run(
        [str(BIN / "mpiexec"), "-n", str(n), sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def program(tmp_path):
    """program(source) -> path of a script file holding the dedented source."""
    counter = iter(range(1000))
    return lambda source: _script(tmp_path, source, f"prog{next(counter)}.py")


@pytest.fixture
def fmpi():
    return run_fmpi


@pytest.fixture
def mpich():
    return run_mpich


# ---------------------------------------------------------------- a real redis-server (for tests outside tests/relay)
@pytest.fixture(scope="module")
def redis_server():
    """(url, client) of a fresh redis-server on a free port, password required, nothing persisted; always stopped."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed (scripts/test.sh installs it)"
    port, password = free_port(), "pw-for-tests"
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--requirepass", password],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, password=password)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)
    yield f"redis://:{password}@127.0.0.1:{port}/0", client
    client.close()
    proc.terminate()
    proc.wait(10)
