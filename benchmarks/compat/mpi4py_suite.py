#!/usr/bin/env python3
"""Run mpi4py's own unittest suite, unmodified, under fmpirun and under MPICH's mpiexec.

The suite is the ``test/`` directory of the mpi4py source distribution from the
package index. It is downloaded (``pip download --no-binary :all:``) and unpacked
into a cache directory at run time; nothing of it is kept in this repository.

Each test file is one job per launcher and rank count::

    fmpirun -n N  python mpi4py_suite.py _worker --testdir T --module test_x --outdir O
    mpiexec -n N  python mpi4py_suite.py _worker ...

The worker (this same file) does what mpi4py's test/main.py does before loading
a module (sys.path, no cupy/numba, ``import mpi4py.MPI``), then runs the module's
tests with a ``unittest.TestResult`` that appends one JSON line per event to
``O/rank<r>.jsonl``, flushed as it goes: so a job that hangs or dies still tells
which tests ended how, and which test each rank was in when it stopped.

A job with no progress for ``--stall`` seconds, or running longer than
``--timeout``, is killed: its process group and every process carrying the
job's marker in its environment (fmpirun starts each rank in a session of its
own). The test(s) it was in are reported as hung; with ``--max-restarts`` the
file is run again without the tests already finished and the hung one.

    python benchmarks/compat/mpi4py_suite.py --ns 1,2,4 --json out.json --markdown out.md
    python benchmarks/compat/mpi4py_suite.py --files p2p_obj,cco_obj --ns 2 --no-mpich
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
import uuid
from pathlib import Path

MPI4PY_VERSION = "4.1.2"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fmpi" / "mpi4py-suite"
MARKER_VAR = "FMPI_SUITE_JOB"
IMPLS = ("fmpi", "fmpi-probe", "mpich")
# Outcomes of one test in one (impl, N) run, worst first: how ranks' outcomes combine.
OUTCOMES = ("crash", "hang", "error", "failure", "passed", "skipped", "notrun")
COUNT_KEYS = ("run", "passed", "failed", "errors", "skipped", "hung", "notrun")
BIN = Path(sys.executable).parent


class UsageError(Exception):
    pass


# ---------------------------------------------------------------------------
# The worker: runs inside each rank.
# ---------------------------------------------------------------------------


def _exc_info_record(err) -> dict:
    etype, value, tb = err
    name = etype.__qualname__
    module = getattr(etype, "__module__", "builtins")
    if module not in ("builtins", "__main__"):
        name = f"{module}.{name}"
    message = str(value).strip().splitlines()[0] if str(value).strip() else ""
    if etype.__name__ == "SkipTest":
        return {"exc_type": name, "message": message[:500]}
    text = "".join(traceback.format_exception(etype, value, tb))
    return {"exc_type": name, "message": message[:500], "traceback": text[-6000:]}


class ProbeStub:
    """--probe: stands for a name fmpi.MPI lacks, so that a test module imports and its tests show
    what they need next. Any use but naming it raises NotImplementedError, which mpi4py's tests
    treat as 'feature not available' where they check for it."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _missing(self):
        return NotImplementedError(f"probe stub: fmpi lacks {self._name}")

    def __call__(self, *args, **kwargs):
        raise self._missing()

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return ProbeStub(f"{self._name}.{attr}")

    def __mro_entries__(self, bases):
        return (object,)

    def __repr__(self):
        return f"<probe stub {self._name}>"


# Names whose value the suite needs at import time: a stub that raises would still stop the import.
PROBE_VALUES = {"get_vendor": lambda: ("fmpi", (0, 1, 0))}


def _probe_method(qualname: str):
    def stub(*args, **kwargs):
        raise NotImplementedError(f"probe stub: fmpi lacks {qualname}")

    stub.__name__ = qualname.rsplit(".", 1)[-1]
    return stub


def probe_import(modname: str, MPI, limit: int = 60):
    """Import the test module, stubbing each attribute of fmpi.MPI (or of its classes) whose
    absence stops the import; returns (module or None, [stubbed names in order])."""
    import importlib

    stubbed: list[str] = []
    mod_pat = re.compile(r"module '([\w.]+)' has no attribute '(\w+)'")
    obj_pat = re.compile(r"^(?:type object '(\w+)'|'(\w+)' object) has no attribute '(\w+)'")
    for _ in range(limit):
        for name in [m for m in sys.modules if m == modname]:
            del sys.modules[name]
        try:
            return importlib.import_module(modname), stubbed
        except AttributeError as exc:
            msg = str(exc)
            m = mod_pat.search(msg)
            if m and m.group(1) == MPI.__name__ and not hasattr(MPI, m.group(2)):
                name = m.group(2)
                setattr(MPI, name, PROBE_VALUES.get(name) or ProbeStub(f"MPI.{name}"))
                stubbed.append(f"MPI.{name}")
                continue
            m = obj_pat.search(msg)
            cls = m and getattr(MPI, m.group(1) or m.group(2), None)
            if isinstance(cls, type) and not hasattr(cls, m.group(3)):
                qual = f"MPI.{cls.__name__}.{m.group(3)}"
                setattr(cls, m.group(3), _probe_method(qual))
                stubbed.append(qual)
                continue
            break
        except BaseException:  # noqa: BLE001
            break
    return None, stubbed


def worker(argv: list[str]) -> int:
    import unittest

    p = argparse.ArgumentParser(prog="mpi4py_suite.py _worker")
    p.add_argument("--testdir", required=True)
    p.add_argument("--module", required=True)
    p.add_argument("--outdir", required=True)
    p.add_argument("--skip-file")
    p.add_argument("--probe", action="store_true")
    a = p.parse_args(argv)

    sys.dont_write_bytecode = True
    sys.path.insert(0, a.testdir)
    os.chdir(a.testdir)
    # As test/main.py does by default (no --cupy/--numba).
    sys.modules["cupy"] = None
    sys.modules["numba"] = None
    outdir = Path(a.outdir)
    rank, size, fatal = None, None, None
    info: dict = {}
    try:
        import mpi4py  # noqa: F401  (under fmpirun: fmpi's shim)

        from mpi4py import MPI

        rank = MPI.COMM_WORLD.Get_rank()
        size = MPI.COMM_WORLD.Get_size()
        info["mpi4py_file"] = getattr(mpi4py, "__file__", None)
        info["MPI_file"] = getattr(MPI, "__file__", None)
        try:
            info["library"] = MPI.Get_library_version().strip().splitlines()[0]
        except Exception as exc:  # noqa: BLE001
            info["library"] = f"? ({type(exc).__name__})"
    except BaseException:  # noqa: BLE001
        fatal = _exc_info_record(sys.exc_info())
    if rank is None:
        rank = int(os.environ.get("PMI_RANK") or os.environ.get("FMPI_RANK") or -os.getpid())
    path = outdir / f"rank{rank}.jsonl"
    out = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def emit(record: dict) -> None:
        record["t"] = time.time()
        out.write(json.dumps(record) + "\n")
        out.flush()

    if fatal is not None:
        emit({"kind": "fatal", "rank": rank, **fatal})
        out.close()
        return 0

    skip = set()
    if a.skip_file:
        skip = set(Path(a.skip_file).read_text(encoding="utf-8").split())

    import importlib

    loader = unittest.TestLoader()
    if a.probe:
        module, stubbed = probe_import(a.module, MPI)
        info["stubbed"] = stubbed
    try:
        module = importlib.import_module(a.module)
    except BaseException:  # noqa: BLE001  (the whole file is one error, as unittest's _FailedTest)
        test_id = f"{a.module}.<import>"
        emit({"kind": "start", "rank": rank, "size": size, "pid": os.getpid(), "tests": [test_id], **info})
        emit({"kind": "begin", "test": test_id})
        emit({"kind": "end", "test": test_id, "outcome": "error", "import_error": True, **_exc_info_record(sys.exc_info())})
        emit({"kind": "done", "testsRun": 1})
        out.close()
        return 0
    suite = loader.loadTestsFromModule(module)

    def flatten(s):
        for t in s:
            if isinstance(t, unittest.TestSuite):
                yield from flatten(t)
            else:
                yield t

    tests = [t for t in flatten(suite) if t.id() not in skip]
    emit({"kind": "start", "rank": rank, "size": size, "pid": os.getpid(), "tests": [t.id() for t in tests], **info})

    class Result(unittest.TestResult):
        # With subtests, unittest reports a failing subtest only through addSubTest and a skipped
        # one through addSkip(subtest), and then neither addSuccess nor addFailure for the test:
        # stopTest writes the test's end record when nothing else did.
        def startTest(self, test):
            super().startTest(test)
            self._sub = None
            self._subskip = None
            self._ended = False
            self._t0 = time.monotonic()
            emit({"kind": "begin", "test": test.id()})

        def _end(self, test, outcome, err=None, **extra):
            rec = {"kind": "end", "test": test.id(), "outcome": outcome, "duration": round(time.monotonic() - getattr(self, "_t0", time.monotonic()), 4), **extra}
            if err is not None:
                rec.update(_exc_info_record(err))
            self._ended = True
            emit(rec)

        def addSuccess(self, test):
            super().addSuccess(test)
            if self._sub is None:
                self._end(test, "passed")
            else:
                self._end(test, *self._sub)

        def addError(self, test, err):
            super().addError(test, err)
            if isinstance(test, unittest.TestCase):
                self._end(test, "error", err)
            else:  # setUpClass/setUpModule/tearDown* failures: an _ErrorHolder, no startTest
                emit({"kind": "end", "test": test.id(), "outcome": "error", "holder": True, **_exc_info_record(err)})

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self._end(test, "failure", err)

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            if isinstance(test, unittest.case._SubTest):
                self._subskip = self._subskip or str(reason)[:300]
                return
            self._end(test, "skipped", message=str(reason)[:300])

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            self._end(test, "passed")

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            self._end(test, "failure", exc_type="UnexpectedSuccess", message="")

        def addSubTest(self, test, subtest, err):
            super().addSubTest(test, subtest, err)
            if err is not None and self._sub is None:
                outcome = "failure" if issubclass(err[0], test.failureException) else "error"
                self._sub = (outcome, err)

        def stopTest(self, test):
            if not self._ended:
                if self._sub is not None:
                    self._end(test, *self._sub)
                elif self._subskip is not None:
                    self._end(test, "skipped", message=self._subskip)
                else:
                    self._end(test, "passed")
            super().stopTest(test)

    result = Result()
    unittest.TestSuite(tests).run(result)
    emit({"kind": "done", "testsRun": result.testsRun})
    out.close()
    sys.stdout.flush()
    sys.stderr.flush()
    return 0


# ---------------------------------------------------------------------------
# The suite: download, unpack, list.
# ---------------------------------------------------------------------------


def ensure_sdist(cache: Path, version: str = MPI4PY_VERSION) -> Path:
    """mpi4py's sdist in the cache, downloaded with pip on first use."""
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob(f"mpi4py-{version}.tar.gz"))
    if not found:
        print(f"downloading the mpi4py {version} sdist into {cache} ...")
        with tempfile.TemporaryDirectory(dir=cache) as tmp:  # then moved in whole: a concurrent reader never sees half
            cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "--disable-pip-version-check", "-q", f"mpi4py=={version}", "-d", tmp]
            # pip reads an sdist's metadata by building it: in an isolated build environment that means
            # compiling Cython first (about 5 min here), with this environment's setuptools and wheel 2 s.
            proc = subprocess.run([*cmd, "--no-build-isolation"], capture_output=True, text=True, timeout=900)
            if proc.returncode != 0:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            got = sorted(Path(tmp).glob(f"mpi4py-{version}.tar.gz"))
            if proc.returncode != 0 or not got:
                tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
                raise UsageError(f"cannot download the mpi4py {version} sdist with pip:\n{tail}")
            os.replace(got[0], cache / got[0].name)
        found = sorted(cache.glob(f"mpi4py-{version}.tar.gz"))
    return found[0]


def ensure_suite(cache: Path, version: str = MPI4PY_VERSION, sdist: Path | None = None) -> Path:
    """The test/ directory of mpi4py's sdist, downloaded and unpacked under cache on first use."""
    root = cache / f"mpi4py-{version}"
    testdir = root / "test"
    if (testdir / "runtests.py").is_file():
        return testdir
    sdist = sdist or ensure_sdist(cache, version)
    with tempfile.TemporaryDirectory(dir=cache) as tmp, tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(f"mpi4py-{version}/test/") or m.name == f"mpi4py-{version}/PKG-INFO"]
        if not members:
            raise UsageError(f"{sdist} has no mpi4py-{version}/test/ directory")
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(tmp, members=members, **kwargs)
        if root.exists():
            shutil.rmtree(root)
        os.replace(Path(tmp) / f"mpi4py-{version}", root)
    return testdir


def list_files(testdir: Path, patterns: list[str]) -> list[str]:
    names = sorted(p.stem for p in testdir.glob("test_*.py"))
    if not patterns:
        return names
    chosen = []
    for name in names:
        for pat in patterns:
            glob = pat if any(c in pat for c in "*?[") else f"*{pat}*"
            if fnmatch.fnmatchcase(name, glob) or fnmatch.fnmatchcase(name + ".py", glob):
                chosen.append(name)
                break
    return chosen


# ---------------------------------------------------------------------------
# Running one job, watching it, killing it.
# ---------------------------------------------------------------------------


def _marked_pids(marker: str) -> list[int]:
    """Processes whose environment carries MARKER_VAR=marker: the job's, wherever they were reparented."""
    needle = f"{MARKER_VAR}={marker}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def kill_job(proc: subprocess.Popen, marker: str, grace: float = 3.0) -> None:
    """SIGTERM then SIGKILL the job's process group and every process carrying its marker."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in _marked_pids(marker):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        if sig == signal.SIGTERM:
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and (proc.poll() is None or _marked_pids(marker)):
                time.sleep(0.1)
            if proc.poll() is not None and not _marked_pids(marker):
                return
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass


def read_rank_files(outdir: Path) -> dict[int, list[dict]]:
    ranks: dict[int, list[dict]] = {}
    for path in sorted(outdir.glob("rank*.jsonl")):
        try:
            rank = int(path.stem[4:])
        except ValueError:
            continue
        records = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut by a kill
        ranks[rank] = records
    return ranks


def _outdir_size(outdir: Path) -> int:
    return sum(p.stat().st_size for p in outdir.glob("rank*.jsonl"))


def launch_argv(impl: str, n: int, worker_args: list[str], mpiexec: str) -> list[str]:
    me = str(Path(__file__).resolve())
    if impl == "fmpi":
        return [sys.executable, "-m", "fmpi", "-n", str(n), sys.executable, me, "_worker", *worker_args]
    if impl == "fmpi-probe":
        return [sys.executable, "-m", "fmpi", "-n", str(n), sys.executable, me, "_worker", *worker_args, "--probe"]
    return [mpiexec, "-n", str(n), sys.executable, me, "_worker", *worker_args]


def job_env(impl: str, marker: str, testdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env[MARKER_VAR] = marker
    # Only the test directory (fmpirun puts its shim before it; MPICH's ranks must see the real
    # mpi4py). When runtests.py is __main__, processes that mpi4py.futures / mpi4py.util.pool spawn
    # re-run __main__ and so find the test modules beside it; our worker is __main__ instead, so
    # they find them through PYTHONPATH.
    env["PYTHONPATH"] = str(testdir)
    if impl != "mpich" and os.environ.get("PYTHONPATH"):
        # fmpirun (and so the ranks' fmpi) from the caller's PYTHONPATH, e.g. a worktree's src/
        # over an editable install of another checkout; MPICH's ranks keep the test directory only.
        env["PYTHONPATH"] += os.pathsep + os.environ["PYTHONPATH"]
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    if impl != "mpich":
        env.pop("FMPI_JOB", None)
    return env


def run_attempt(impl, n, module, testdir, workdir, skip, timeout, stall, done_grace, mpiexec, attempt) -> dict:
    """One launch of one file; returns the status and the ranks' records."""
    outdir = workdir / f"attempt{attempt}"
    outdir.mkdir(parents=True, exist_ok=True)
    args = ["--testdir", str(testdir), "--module", module, "--outdir", str(outdir)]
    if skip:
        skip_file = outdir / "skip.txt"
        skip_file.write_text("\n".join(sorted(skip)) + "\n", encoding="utf-8")
        args += ["--skip-file", str(skip_file)]
    marker = uuid.uuid4().hex
    log_path = outdir / "output.log"
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            launch_argv(impl, n, args, mpiexec),
            cwd=str(testdir),
            env=job_env(impl, marker, testdir),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        status, reason = "exited", ""
        last_size, last_change = -1, time.monotonic()
        done_since = None
        try:
            while True:
                try:
                    proc.wait(0.25)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                size = _outdir_size(outdir)
                if size != last_size:
                    last_size, last_change = size, now
                if now - t0 > timeout:
                    status, reason = "timeout", f"file run exceeded --timeout {timeout:g}s"
                    break
                ranks = read_rank_files(outdir) if now - last_change > 1.0 else None
                if ranks is not None and len(ranks) >= n and all(any(r["kind"] in ("done", "fatal") for r in recs) for recs in ranks.values()):
                    done_since = done_since or now
                    if now - done_since > done_grace:
                        status, reason = "exit-hang", f"all ranks finished their tests but the job did not exit within {done_grace:g}s (MPI finalization?)"
                        break
                elif now - last_change > stall:
                    status, reason = "stall", f"no test progress for {stall:g}s"
                    break
        finally:
            if proc.poll() is None or _marked_pids(marker):
                kill_job(proc, marker)
    duration = time.monotonic() - t0
    returncode = proc.returncode
    text = log_path.read_text(encoding="utf-8", errors="replace")
    return {
        "status": status,
        "reason": reason,
        "returncode": returncode,
        "duration": round(duration, 2),
        "ranks": read_rank_files(outdir),
        "log_tail": text.splitlines()[-40:],
        "log": str(log_path),
    }


# ---------------------------------------------------------------------------
# Aggregation: ranks -> tests -> counts (pure functions, unit-tested).
# ---------------------------------------------------------------------------

_RANK_OUTCOME_ORDER = {o: i for i, o in enumerate(OUTCOMES)}


def _launcher_reason(log_tail: list[str]) -> str:
    for line in reversed(log_tail):
        s = line.strip()
        if s.startswith("fmpirun:") or "BAD TERMINATION" in s or "Segmentation" in s or "Killed" in s:
            return s[:300]
    return (log_tail[-1].strip()[:300] if log_tail else "")


def combine_attempt(attempt: dict, n: int) -> dict:
    """Per-test outcome of one attempt, across ranks.

    Returns {"order": [test ids], "tests": {id: {...}}, "complete": bool,
    "fatal": record or None, "interrupted": [ids that hung/crashed]}.
    """
    ranks = attempt["ranks"]
    order: list[str] = []
    seen = set()
    for r in sorted(ranks):
        for rec in ranks[r]:
            if rec["kind"] == "start":
                for t in rec["tests"]:
                    if t not in seen:
                        seen.add(t)
                        order.append(t)
                break
    per_test: dict[str, dict[int, dict]] = {}
    began: dict[str, set[int]] = {}
    fatal = None
    finished_ranks = set()
    for r, recs in ranks.items():
        for rec in recs:
            kind = rec["kind"]
            if kind == "begin":
                began.setdefault(rec["test"], set()).add(r)
            elif kind == "end":
                per_test.setdefault(rec["test"], {})[r] = rec
                if rec["test"] not in seen:  # setUpClass errors and the like
                    seen.add(rec["test"])
                    order.append(rec["test"])
            elif kind == "fatal":
                fatal = fatal or {**rec, "rank": r}
                finished_ranks.add(r)
            elif kind == "done":
                finished_ranks.add(r)
    complete = len(finished_ranks) >= n and attempt["status"] in ("exited", "exit-hang")
    stopped = not complete
    # The first test (in suite order) that some rank began and did not end: the one that hung or crashed.
    culprit = None
    if stopped:
        for t in order:
            open_ranks = began.get(t, set()) - set(per_test.get(t, {}))
            if open_ranks:
                culprit = t
                break
    kind = "hang" if attempt["status"] in ("timeout", "stall") else "crash"
    tests: dict[str, dict] = {}
    for t in order:
        ends = per_test.get(t, {})
        if t == culprit:
            open_ranks = sorted(began.get(t, set()) - set(ends))
            why = attempt["reason"] if kind == "hang" else (_launcher_reason(attempt["log_tail"]) or f"job exited with status {attempt['returncode']}")
            tests[t] = {"outcome": kind, "exc_type": kind.upper(), "message": why, "ranks": open_ranks}
            continue
        if stopped and len(ends) < n:
            continue  # cut short by the hang/crash of another test: not a result, may run again
        if not ends:
            continue
        worst = min(ends.values(), key=lambda rec: (_RANK_OUTCOME_ORDER[rec["outcome"]], 0))
        outcomes = {rec["outcome"] for rec in ends.values()}
        if outcomes == {"skipped"}:
            worst = ends[min(ends)]
        entry = {"outcome": worst["outcome"]}
        for key in ("exc_type", "message", "traceback", "holder"):
            if key in worst:
                entry[key] = worst[key]
        bad = sorted(r for r, rec in ends.items() if rec["outcome"] == worst["outcome"])
        if worst["outcome"] in ("error", "failure"):
            entry["ranks"] = bad
        tests[t] = entry
    return {"order": order, "tests": tests, "complete": complete, "fatal": fatal, "culprit": culprit}


def counts_of(tests: dict[str, dict], order: list[str]) -> dict[str, int]:
    c = dict.fromkeys(COUNT_KEYS, 0)
    key = {"passed": "passed", "failure": "failed", "error": "errors", "crash": "errors", "skipped": "skipped", "hang": "hung"}
    for t in order:
        entry = tests.get(t)
        if entry is None or entry["outcome"] == "notrun":
            c["notrun"] += 1
            continue
        c["run"] += 1
        c[key[entry["outcome"]]] += 1
    return c


def file_result(attempts: list[dict], n: int) -> dict:
    """Merge the attempts of one file (a later attempt only runs what earlier ones did not finish)."""
    order: list[str] = []
    tests: dict[str, dict] = {}
    statuses = []
    fatal = None
    stubbed: list[str] = []
    mpi: dict = {}
    for att in attempts:
        for recs in att["ranks"].values():
            for rec in recs:
                if rec["kind"] == "start":
                    stubbed += [x for x in rec.get("stubbed", ()) if x not in stubbed]
                    mpi = mpi or {k: rec[k] for k in ("mpi4py_file", "library") if k in rec}
        comb = combine_attempt(att, n)
        for t in comb["order"]:
            if t not in order:
                order.append(t)
        tests.update(comb["tests"])
        fatal = fatal or comb["fatal"]
        statuses.append(att["status"] if att["status"] != "exited" or comb["complete"] else "crash")
    if fatal is not None and not order:
        # mpi4py.MPI itself could not be imported: the file did not run at all.
        tests["<import mpi4py.MPI>"] = {"outcome": "error", "exc_type": fatal.get("exc_type"), "message": fatal.get("message"), "traceback": fatal.get("traceback", "")}
        order.append("<import mpi4py.MPI>")
    if not order and attempts:
        att = attempts[-1]
        tests["<job>"] = {"outcome": "crash" if att["status"] == "exited" else "hang", "exc_type": "CRASH" if att["status"] == "exited" else "HANG", "message": att["reason"] or _launcher_reason(att["log_tail"]) or f"job exited with status {att['returncode']} before any rank started a test"}
        order.append("<job>")
    for t in order:
        tests.setdefault(t, {"outcome": "notrun"})
    status = "ok"
    if any(s in ("timeout", "stall") for s in statuses):
        status = "hang"
    elif "crash" in statuses:
        status = "crash"
    elif "exit-hang" in statuses:
        status = "exit-hang"
    elif len(order) == 1 and order[0].endswith(".<import>") and tests[order[0]]["outcome"] == "error":
        status = "import-error"
    return {
        "status": status,
        "attempts": [{k: a[k] for k in ("status", "reason", "returncode", "duration", "log")} for a in attempts],
        "duration": round(sum(a["duration"] for a in attempts), 2),
        "counts": counts_of(tests, order),
        "tests": {t: tests[t] for t in order},
        "mpi": mpi,
        **({"stubbed": stubbed} if stubbed else {}),
    }


def run_file(impl, n, module, testdir, workroot, timeout, stall, done_grace, max_restarts, mpiexec) -> dict:
    workdir = workroot / impl / f"n{n}" / module
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    attempts: list[dict] = []
    skip: set[str] = set()
    for attempt in range(max_restarts + 1):
        att = run_attempt(impl, n, module, testdir, workdir, skip, timeout, stall, done_grace, mpiexec, attempt)
        attempts.append(att)
        comb = combine_attempt(att, n)
        if comb["complete"] or comb["fatal"] is not None or not comb["order"]:
            break
        finished = {t for t, e in comb["tests"].items()}
        remaining = [t for t in comb["order"] if t not in finished and t not in skip]
        if not remaining:
            break
        skip |= finished
    return file_result(attempts, n)


_NUM = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])")
_ADDR = re.compile(r"0x[0-9a-fA-F]+")


def normalize_message(message: str) -> str:
    message = _ADDR.sub("0x?", message or "")
    message = re.sub(r"/tmp/\S+", "/tmp/…", message)
    message = _NUM.sub("#", message)
    return message[:200]


def cause_key(entry: dict) -> tuple[str, str]:
    return (entry.get("exc_type") or "?", normalize_message(entry.get("message") or ""))


def aggregate(results: list[dict]) -> dict:
    """Totals per impl and N, and failure causes (exception type + normalized message) per impl."""
    totals: dict[str, dict[str, dict[str, int]]] = {}
    causes: dict[str, dict[tuple[str, str], dict]] = {}
    skips: dict[str, dict[str, dict]] = {}
    mpich_runs = {(r["n"], r["file"]): r["counts"]["run"] for r in results if r["impl"] == "mpich"}
    for r in results:
        t = totals.setdefault(r["impl"], {}).setdefault(str(r["n"]), dict.fromkeys(COUNT_KEYS, 0))
        for k in COUNT_KEYS:
            t[k] += r["counts"][k]
        t["files"] = t.get("files", 0) + 1
        t["files_ok"] = t.get("files_ok", 0) + (r["status"] == "ok")
        for test, entry in r["tests"].items():
            if entry["outcome"] == "skipped":
                reason = entry.get("message") or "?"
                sk = skips.setdefault(r["impl"], {}).setdefault(reason, {"reason": reason, "count": 0, "files": []})
                sk["count"] += 1
                if r["file"] not in sk["files"]:
                    sk["files"].append(r["file"])
            if entry["outcome"] not in ("error", "failure", "hang", "crash"):
                continue
            key = cause_key(entry)
            c = causes.setdefault(r["impl"], {}).setdefault(key, {"exc_type": key[0], "message": key[1], "outcome": entry["outcome"], "count": 0, "weight": 0, "ns": [], "files": [], "examples": []})
            c["count"] += 1
            # A module that failed to import stands for all the tests MPICH ran in that file.
            whole_file = test.endswith(".<import>") or test.startswith("<")
            c["weight"] += max(1, mpich_runs.get((r["n"], r["file"]), 1)) if whole_file else 1
            if r["n"] not in c["ns"]:
                c["ns"].append(r["n"])
            if r["file"] not in c["files"]:
                c["files"].append(r["file"])
            if len(c["examples"]) < 5:
                c["examples"].append(f"{test} @N={r['n']}")
            if "traceback" in entry and "traceback" not in c:
                c["traceback"] = entry["traceback"]
    ranked = {impl: sorted(d.values(), key=lambda c: (-c["count"], -c["weight"], c["exc_type"], c["message"])) for impl, d in causes.items()}
    skipped = {impl: sorted(d.values(), key=lambda k: (-k["count"], k["reason"])) for impl, d in skips.items()}
    return {"totals": totals, "causes": ranked, "skips": skipped}


# ---------------------------------------------------------------------------
# Reports.
# ---------------------------------------------------------------------------


def _cell(counts: dict | None, status: str | None) -> list[str]:
    if counts is None:
        return ["–"] * 8
    return [str(counts[k]) for k in ("run", "passed", "failed", "errors", "skipped", "hung", "notrun")] + [status or ""]


def markdown(report: dict, top: int = 25) -> str:
    results = report["results"]
    impls = [i for i in IMPLS if any(r["impl"] == i for r in results)]
    ns = sorted({r["n"] for r in results})
    files = sorted({r["file"] for r in results})
    by = {(r["impl"], r["n"], r["file"]): r for r in results}
    agg = report["aggregate"]
    lines = [f"# mpi4py {report['meta']['mpi4py_version']} test suite: fmpi vs MPICH", ""]
    lines.append(f"Generated {report['meta']['date']} by `benchmarks/compat/mpi4py_suite.py` ({report['meta']['argv']}).")
    lines.append("Counts are tests (one test at one N counts once, whatever the number of ranks); a test is failed/error if any rank says so; "
                 "`hung` = the test a killed job was in; `notrun` = tests a hang or crash kept from running.")
    lines.append("")
    lines.append("## Totals")
    lines.append("")
    lines.append("| impl | N | files | files ok | run | passed | failed | errors | skipped | hung | notrun |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for impl in impls:
        for n in ns:
            t = agg["totals"].get(impl, {}).get(str(n))
            if t:
                lines.append(f"| {impl} | {n} | {t['files']} | {t['files_ok']} | " + " | ".join(str(t[k]) for k in COUNT_KEYS) + " |")
    for n in ns:
        lines.append("")
        lines.append(f"## Per file, N = {n}")
        lines.append("")
        head = ["file"]
        for impl in impls:
            head += [f"{impl} {k}" for k in ("run", "pass", "fail", "err", "skip", "hang", "notrun", "status")]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for f in files:
            row = [f]
            for impl in impls:
                r = by.get((impl, n, f))
                row += _cell(r and r["counts"], r and r["status"])
            lines.append("| " + " | ".join(row) + " |")
    for impl in impls:
        cs = agg["causes"].get(impl, [])
        lines.append("")
        lines.append(f"## Top failure causes, {impl} ({len(cs)} distinct)")
        lines.append("")
        lines.append("| # | count (test×N) | tests covered | outcome | exception | message | N | files |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for i, c in enumerate(cs[:top], 1):
            msg = c["message"].replace("|", "\\|")
            fl = ", ".join(c["files"][:6]) + (f", … (+{len(c['files']) - 6})" if len(c["files"]) > 6 else "")
            lines.append(f"| {i} | {c['count']} | {c['weight']} | {c['outcome']} | `{c['exc_type']}` | {msg} | {','.join(map(str, sorted(c['ns'])))} | {fl} |")
    for impl in impls:
        sk = agg.get("skips", {}).get(impl, [])
        lines.append("")
        lines.append(f"## Skip reasons, {impl} (test×N)")
        lines.append("")
        lines.append("| count | reason | files |")
        lines.append("|---|---|---|")
        for k in sk[:top]:
            fl = ", ".join(k["files"][:6]) + (f", … (+{len(k['files']) - 6})" if len(k["files"]) > 6 else "")
            lines.append(f"| {k['count']} | {k['reason'].replace('|', '/')} | {fl} |")
    hangs = [(r["impl"], r["n"], r["file"], t) for r in results for t, e in r["tests"].items() if e["outcome"] == "hang"]
    lines.append("")
    lines.append(f"## Hung tests ({len(hangs)})")
    lines.append("")
    for impl, n, f, t in hangs:
        lines.append(f"- {impl} N={n}: `{t}`")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# CLI.
# ---------------------------------------------------------------------------


def parse_ns(text: str) -> list[int]:
    try:
        ns = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ns must be comma-separated rank counts like 1,2,4, not {text!r}") from None
    if not ns or any(n < 1 for n in ns):
        raise argparse.ArgumentTypeError(f"--ns must be comma-separated positive rank counts like 1,2,4, not {text!r}")
    return ns


def positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, not {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mpi4py_suite.py",
        description="Run mpi4py's unittest suite (from its sdist, unmodified) under fmpirun and MPICH's mpiexec; report per test file.",
    )
    p.add_argument("--ns", type=parse_ns, default=[1, 2, 4], help="rank counts, comma-separated (default 1,2,4)")
    p.add_argument("--files", action="append", default=[], metavar="PATTERN",
                   help="only test files matching PATTERN (glob, or substring without wildcards; comma-separated or repeated)")
    p.add_argument("--timeout", type=positive, default=300.0, help="seconds for one run of one file (default 300); the job is then killed")
    p.add_argument("--stall", type=positive, default=60.0, help="kill a job whose tests make no progress for this long (default 60 s)")
    p.add_argument("--done-grace", type=positive, default=20.0, help="seconds a job may take to exit after all ranks finished (default 20)")
    p.add_argument("--max-restarts", type=int, default=3, help="after a hang or crash, run the file again without the finished and hung tests, this many times (default 3)")
    p.add_argument("--mpich", dest="mpich", action="store_true", default=True, help="also run under MPICH's mpiexec (default)")
    p.add_argument("--no-mpich", dest="mpich", action="store_false", help="fmpi only")
    p.add_argument("--no-fmpi", dest="fmpi", action="store_false", default=True, help="MPICH only")
    p.add_argument("--probe", action="store_true",
                   help="diagnostic, reported apart as 'fmpi-probe': names fmpi.MPI lacks that stop a test module's import are "
                        "stubbed (use raises NotImplementedError) so the tests behind them run and show the next layer of gaps")
    p.add_argument("--mpiexec", default=None, help="MPICH's mpiexec (default: the one beside this Python)")
    p.add_argument("--json", type=Path, help="write the full report (every test's outcome) as JSON here")
    p.add_argument("--markdown", type=Path, help="write the per-file tables and the top causes as Markdown here")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"where the sdist is downloaded and unpacked (default {DEFAULT_CACHE})")
    p.add_argument("--sdist", type=Path, help="use this mpi4py sdist (.tar.gz) instead of downloading it")
    p.add_argument("--workdir", type=Path, help="keep the jobs' logs and rank records here (default: a temporary directory, removed)")
    p.add_argument("--resume", action="store_true", help="reuse the (impl, N, file) results already in --json")
    p.add_argument("--merge", type=Path, nargs="+", metavar="JSON",
                   help="run nothing: combine these reports (e.g. an fmpi, a --probe and an MPICH run) into --json/--markdown")
    p.add_argument("--top", type=int, default=25, help="failure causes listed per impl in the Markdown (default 25)")
    return p


def validate(a, parser) -> None:
    if a.max_restarts < 0:
        parser.error("--max-restarts must be 0 or more")
    if not a.fmpi and not a.mpich:
        parser.error("--no-fmpi with --no-mpich leaves nothing to run")
    if a.resume and not a.json:
        parser.error("--resume needs --json (the report to resume from)")
    if a.sdist is not None and not a.sdist.is_file():
        parser.error(f"--sdist {a.sdist}: no such file")
    for opt in ("json", "markdown"):
        path = getattr(a, opt)
        if path is not None and not path.resolve().parent.is_dir():
            parser.error(f"--{opt} {path}: directory {path.resolve().parent} does not exist")
    if a.mpich:
        a.mpiexec = a.mpiexec or (str(BIN / "mpiexec") if (BIN / "mpiexec").exists() else shutil.which("mpiexec"))
        if not a.mpiexec:
            parser.error("no mpiexec beside this Python nor on PATH (pip install mpich mpi4py, or pass --mpiexec, or --no-mpich)")
        import importlib.util

        if importlib.util.find_spec("mpi4py") is None:
            parser.error("the real mpi4py is not importable by this Python (pip install mpi4py), or pass --no-mpich")
    if a.fmpi:
        import importlib.util

        if importlib.util.find_spec("fmpi") is None:
            parser.error("fmpi is not importable by this Python (pip install -e . in the repository), or pass --no-fmpi")


def write_reports(report: dict, a) -> None:
    report["aggregate"] = aggregate(report["results"])
    if a.json:
        tmp = a.json.with_suffix(a.json.suffix + ".tmp")
        tmp.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, a.json)
    if a.markdown:
        a.markdown.write_text(markdown(report, a.top), encoding="utf-8")


def merge_reports(a, parser) -> int:
    if not (a.json or a.markdown):
        parser.error("--merge needs --json and/or --markdown to write the combined report to")
    results: dict[tuple[str, int, str], dict] = {}
    metas = []
    for path in a.merge:
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
            metas.append(old["meta"])
            for r in old["results"]:
                results[(r["impl"], r["n"], r["file"])] = r
        except (OSError, ValueError, KeyError) as exc:
            parser.error(f"--merge {path}: not a report of this script ({type(exc).__name__}: {exc})")
    meta = dict(metas[-1])
    meta["argv"] = "; ".join(m.get("argv", "") for m in metas)
    meta["impls"] = [i for i in IMPLS if any(k[0] == i for k in results)]
    meta["ns"] = sorted({k[1] for k in results})
    report = {"meta": meta, "results": sorted(results.values(), key=lambda r: (IMPLS.index(r["impl"]), r["n"], r["file"]))}
    write_reports(report, a)
    print(f"merged {len(results)} file results from {len(a.merge)} reports")
    return 0


def summary_line(r: dict) -> str:
    c = r["counts"]
    extra = f" hung={c['hung']} notrun={c['notrun']}" if c["hung"] or c["notrun"] else ""
    return f"run={c['run']} pass={c['passed']} fail={c['failed']} err={c['errors']} skip={c['skipped']}{extra} [{r['status']}, {r['duration']:.1f}s]"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_worker"]:
        return worker(argv[1:])
    parser = build_parser()
    a = parser.parse_args(argv)
    a.files = [p.strip() for item in a.files for p in item.split(",") if p.strip()]
    if a.merge:
        return merge_reports(a, parser)
    validate(a, parser)
    try:
        testdir = ensure_suite(a.cache, MPI4PY_VERSION, a.sdist)
    except UsageError as exc:
        print(f"mpi4py_suite.py: error: {exc}", file=sys.stderr)
        return 2
    files = list_files(testdir, a.files)
    if not files:
        parser.error(f"--files {','.join(a.files)} matches no test file in {testdir}")
    impls = [i for i in IMPLS if (i == "fmpi" and a.fmpi and not a.probe) or (i == "fmpi-probe" and a.fmpi and a.probe) or (i == "mpich" and a.mpich)]
    report = {
        "meta": {
            "mpi4py_version": MPI4PY_VERSION,
            "testdir": str(testdir),
            "argv": " ".join(argv),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "python": sys.version.split()[0],
            "impls": impls,
            "ns": a.ns,
            "timeout": a.timeout,
            "stall": a.stall,
            "max_restarts": a.max_restarts,
        },
        "results": [],
    }
    done: dict[tuple[str, int, str], dict] = {}
    if a.resume and a.json.exists():
        old = json.loads(a.json.read_text(encoding="utf-8"))
        done = {(r["impl"], r["n"], r["file"]): r for r in old.get("results", [])}
    keep_workdir = a.workdir is not None
    workroot = a.workdir or Path(tempfile.mkdtemp(prefix="mpi4py-suite-"))
    workroot.mkdir(parents=True, exist_ok=True)
    total = len(impls) * len(a.ns) * len(files)
    print(f"mpi4py {MPI4PY_VERSION} suite: {len(files)} files x N={a.ns} x {impls} = {total} jobs; tests in {testdir}", flush=True)
    i = 0
    try:
        for impl in impls:
            for n in a.ns:
                for f in files:
                    i += 1
                    prefix = f"[{i}/{total}] {impl:5} N={n} {f:28}"
                    if (impl, n, f) in done:
                        r = done[(impl, n, f)]
                        print(f"{prefix} (resumed) {summary_line(r)}", flush=True)
                    else:
                        r = run_file(impl, n, f, testdir, workroot, a.timeout, a.stall, a.done_grace, a.max_restarts, a.mpiexec)
                        r = {"impl": impl, "n": n, "file": f, **r}
                        print(f"{prefix} {summary_line(r)}", flush=True)
                    report["results"].append(r)
                    write_reports(report, a)
    except KeyboardInterrupt:
        print("interrupted: the reports hold the jobs finished so far", file=sys.stderr)
        write_reports(report, a)
        return 130
    finally:
        if not keep_workdir:
            shutil.rmtree(workroot, ignore_errors=True)
    write_reports(report, a)
    agg = report["aggregate"]
    print("\ntotals (run / passed / failed / errors / skipped / hung / notrun):")
    for impl in impls:
        for n in a.ns:
            t = agg["totals"][impl][str(n)]
            print(f"  {impl:5} N={n}: " + " / ".join(str(t[k]) for k in COUNT_KEYS) + f"   ({t['files_ok']}/{t['files']} files ran clean)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
