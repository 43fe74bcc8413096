"""Small helpers shared by test modules (importable because pytest puts tests/ on sys.path)."""

from __future__ import annotations

import importlib.util
import re
import socket
import subprocess
import sys
import time
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterable

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]


def load_script(relative: str, name: str) -> ModuleType:
    """A script of the repository that is not part of the package (a benchmark, an app, a docs tool), as a module."""
    spec = importlib.util.spec_from_file_location(name, REPO / relative)
    assert spec is not None and spec.loader is not None, relative
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fmpirun_argv(*args: str) -> list[str]:
    return [str(BIN / "fmpirun"), *args]


def pids_alive(pids: Iterable[int]) -> list[int]:
    """The pids that still exist as running (non-zombie) processes."""
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def wait_for_file(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.05)


def written_lines(directory: Path, pattern: str = "*.txt") -> list[str]:
    """The lines the ranks of a job wrote to files in `directory` (one file each), sorted."""
    return sorted(line for f in directory.glob(pattern) for line in f.read_text().splitlines())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def verdict(result, label: str) -> int:
    """A checking program's run: exit 0, no FAIL line, and a positive CASES count (returned)."""
    assert result.returncode == 0, f"{label}: exit {result.returncode}\n{result.stderr[-4000:]}\n{result.stdout[-2000:]}"
    fails = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert not fails, f"{label}: {len(fails)} failed cases:\n" + "\n".join(fails[:40])
    counts = [int(m.group(1)) for m in re.finditer(r"^CASES (\d+)$", result.stdout, re.MULTILINE)]
    assert counts and counts[0] > 0, f"{label}: the program reported no cases\n{result.stdout[-2000:]}"
    return counts[0]


class RelayProcess:
    """A real `fmpi-relay` subprocess on a free port (the relay picks it: no race for the port).

    `scheme` is what it must say it listens on (tls, given --tls-cert and
    --tls-key); with `keep_stderr` its stderr is kept, for a failed start's
    error and for what ``stop()`` returns.
    """

    def __init__(self, *args: str, scheme: str = "tcp", keep_stderr: bool = False) -> None:
        self.proc = subprocess.Popen(
            [str(BIN / "fmpi-relay"), "--host", "127.0.0.1", "--port", "0", "--probe-port", "-1", "--log-level", "WARNING", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if keep_stderr else subprocess.DEVNULL,
            text=True,
        )
        line = self.proc.stdout.readline()
        if not line.startswith(f"fmpi-relay listening on {scheme}://"):
            err = self.stop()
            raise RuntimeError(f"fmpi-relay did not start: {line!r}" + (f" {err!r}" if keep_stderr else ""))
        self.url = line.split()[-1]
        host, port = self.url[len(f"{scheme}://") :].rsplit(":", 1)
        self.address = (host, int(port))

    def stop(self) -> str:
        """Terminate it (kill after 10 s); its stderr if kept, else '' (and the same again when stopped before: a
        test may stop it for its log, then its fixture stops every relay it started)."""
        if getattr(self, "_stderr", None) is not None:
            return self._stderr
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        err = self.proc.stderr.read() if self.proc.stderr else ""
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()
        self._stderr = err
        return err


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def lines(self) -> list[str]:
        return self.stdout.splitlines()

    def sorted_lines(self) -> list[str]:
        return sorted(self.stdout.splitlines())


def run_fmpi(n: int, script: Path, *args: str, extra: tuple[str, ...] = (), timeout: float = 120, env=None) -> Run:
    proc = subprocess.run(
        fmpirun_argv("-n", str(n), *extra, sys.executable, str(script), *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


MPICH_ATTEMPTS = 3  # runs of a reference job before its failure counts (see run_mpich)


def run_mpich(n: int, script: Path, *args: str, timeout: float = 120) -> Run:
    """The reference: the same program under real MPICH + mpi4py (from the package index)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    # Unbuffered, print() makes one write per argument, and hydra interleaves the ranks' output at write
    # boundaries (lines came out cut and merged); buffered, each print(..., flush=True) is one write.
    env.pop("PYTHONUNBUFFERED", None)
    env["MPIR_CVAR_NOLOCAL"] = env.get("MPIR_CVAR_NOLOCAL", "0")
    for _ in range(MPICH_ATTEMPTS):
        proc = subprocess.run(
            [str(BIN / "mpiexec"), "-n", str(n), sys.executable, str(script), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        # On a loaded machine hydra now and then reports one process of a finished job killed at teardown
        # (exit 9, seen with schwimmbad and emcee in CI, never alone); the reference is run again then —
        # it is the yardstick, not the thing under test, and a real failure repeats.
        if proc.returncode == 0 or "BAD TERMINATION" not in proc.stdout + proc.stderr:
            break
    return Run(proc.returncode, proc.stdout, proc.stderr)


def ranks_that_said(stderr: str, text: str) -> int:
    """How many rank notices containing `text` fmpirun reported: the lines it printed, plus the ranks its
    summaries count ("fmpirun: K more ranks said the same ('...text...'): ranks ...")."""
    printed = sum(1 for line in stderr.splitlines() if text in line and not line.startswith("fmpirun: "))
    folded = sum(int(m.group(1)) for m in re.finditer(r"^fmpirun: (\d+) more ranks said the same \('(.*)'\)", stderr, re.M)
                 if m.group(2).rstrip(".") in text or text in m.group(2))
    return printed + folded


# The start of a differential test's program (tests/compat): each outcome is recorded by the builtin class
# mpi4py raises (fmpi's may also be an MPI.Exception), so the lines printed under fmpi and MPICH compare.
OUTCOMES_PRELUDE = r"""import array, os, warnings
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
peer, source = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
out = []

def outcome(label, call):
    try:
        result = call()
        out.append((label, "ok", result))
    except Exception as e:
        kinds = (KeyError, IndexError, BufferError, TypeError, ValueError, RuntimeWarning, NotImplementedError)
        out.append((label, next((k.__name__ for k in kinds if isinstance(e, k)), type(e).__name__)))
"""


def unset_for_the_test(monkeypatch, *names: str) -> None:
    """Remove the environment variables `names` for one test, and remove them again afterwards whatever the
    test set: code under test may set them for the rest of its process (``lambda_backend.aws.connect``
    does), and ``monkeypatch.delenv`` restores only the variables that existed (the rest leaked into the
    next tests of the worker: AWS_PROFILE=work made later Lambda tests fail with ProfileNotFound)."""
    for name in names:
        monkeypatch.setenv(name, "")  # (records "absent" as the value to put back)
        monkeypatch.delenv(name)


def mpi4py_demo(relative: str) -> str:
    """The text of a file of mpi4py's sdist (e.g. ``demo/nxtval/nxtval-mpi3.py``), unmodified: the sdist the
    suite runner downloads and caches (benchmarks/compat/mpi4py_suite.py). Nothing of mpi4py is copied here."""
    import tarfile

    sys.path.insert(0, str(REPO / "benchmarks" / "compat"))
    import mpi4py_suite

    sdist = mpi4py_suite.ensure_sdist(mpi4py_suite.DEFAULT_CACHE)
    with tarfile.open(sdist) as tar:
        member = tar.extractfile(f"mpi4py-{mpi4py_suite.MPI4PY_VERSION}/{relative}")
        assert member is not None, relative
        return member.read().decode()
