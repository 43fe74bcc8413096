"""benchmarks/compat/mpi4py_suite.py: how rank records become per-test outcomes and counts, the kill of a
hung job, usage errors, and (slow) a real run of two files of mpi4py's own suite under fmpirun and MPICH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests_support import REPO, load_script

RELATIVE = "benchmarks/compat/mpi4py_suite.py"
SCRIPT = REPO / RELATIVE
suite = load_script(RELATIVE, "mpi4py_suite")

T = ["test_x.TestA.test1", "test_x.TestA.test2", "test_x.TestA.test3", "test_x.TestB.test4"]


def start(rank, size, tests=T, **extra):
    return {"kind": "start", "rank": rank, "size": size, "tests": list(tests), **extra}


def ran(test, outcome, **extra):
    return [{"kind": "begin", "test": test}, {"kind": "end", "test": test, "outcome": outcome, **extra}]


def attempt(ranks, status="exited", returncode=0, reason="", log_tail=()):
    return {"status": status, "reason": reason, "returncode": returncode, "duration": 1.0, "ranks": ranks, "log_tail": list(log_tail), "log": "x.log"}


def test_ranks_combine_to_the_worst_outcome_and_skips_need_every_rank():
    r0 = [start(0, 2), *ran(T[0], "passed"), *ran(T[1], "passed"), *ran(T[2], "skipped", message="size"), *ran(T[3], "passed"), {"kind": "done"}]
    r1 = [start(1, 2), *ran(T[0], "passed"),
          *ran(T[1], "failure", exc_type="AssertionError", message="3 != 4", traceback="tb"),
          *ran(T[2], "skipped", message="size"),
          *ran(T[3], "error", exc_type="AttributeError", message="module 'fmpi.MPI' has no attribute 'Info'"), {"kind": "done"}]
    res = suite.file_result([attempt({0: r0, 1: r1})], 2)
    assert res["status"] == "ok"
    assert res["counts"] == {"run": 4, "passed": 1, "failed": 1, "errors": 1, "skipped": 1, "hung": 0, "notrun": 0}
    assert res["tests"][T[1]]["ranks"] == [1] and res["tests"][T[1]]["exc_type"] == "AssertionError"
    assert res["tests"][T[3]]["outcome"] == "error"


def test_a_stalled_job_names_the_hung_test_and_a_restart_fills_in_the_rest():
    # Attempt 0: both ranks end test1; rank 0 ends test2 and begins test3, rank 1 hangs in test2.
    r0 = [start(0, 2), *ran(T[0], "passed"), *ran(T[1], "passed"), {"kind": "begin", "test": T[2]}]
    r1 = [start(1, 2), *ran(T[0], "passed"), {"kind": "begin", "test": T[1]}]
    first = attempt({0: r0, 1: r1}, status="stall", returncode=-9, reason="no test progress for 60s")
    comb = suite.combine_attempt(first, 2)
    assert comb["culprit"] == T[1] and not comb["complete"]
    assert set(comb["tests"]) == {T[0], T[1]}  # test3 was cut short by the hang: no result yet
    assert comb["tests"][T[1]]["outcome"] == "hang" and comb["tests"][T[1]]["ranks"] == [1]
    # Attempt 1 skips test1 and test2: only test3 and test4 remain.
    rest = T[2:]
    second = attempt({r: [start(r, 2, rest), *ran(T[2], "passed"), *ran(T[3], "passed"), {"kind": "done"}] for r in (0, 1)})
    res = suite.file_result([first, second], 2)
    assert res["status"] == "hang"
    assert res["counts"] == {"run": 4, "passed": 3, "failed": 0, "errors": 0, "skipped": 0, "hung": 1, "notrun": 0}
    assert [a["status"] for a in res["attempts"]] == ["stall", "exited"]


def test_a_crash_takes_the_launcher_line_as_its_cause_and_unstarted_tests_are_notrun():
    r0 = [start(0, 1), *ran(T[0], "passed"), {"kind": "begin", "test": T[1]}]
    tail = ["Traceback ...", "fmpirun: job aborted by rank 0: uncaught ValueError on rank 0: boom"]
    res = suite.file_result([attempt({0: r0}, returncode=1, log_tail=tail)], 1)
    assert res["status"] == "crash"
    assert res["tests"][T[1]] == {"outcome": "crash", "exc_type": "CRASH", "message": tail[-1], "ranks": [0]}
    assert res["counts"]["notrun"] == 2 and res["counts"]["errors"] == 1 and res["counts"]["run"] == 2


def test_an_import_error_is_one_error_for_the_file_and_weighs_what_mpich_ran():
    imp = "test_x.<import>"
    rec = [start(0, 1, [imp]), *ran(imp, "error", exc_type="AttributeError", message="module 'fmpi.MPI' has no attribute 'get_vendor'", import_error=True), {"kind": "done"}]
    fm = {"impl": "fmpi", "n": 1, "file": "test_x", **suite.file_result([attempt({0: rec})], 1)}
    assert fm["status"] == "import-error" and fm["counts"]["errors"] == 1
    ok = [start(0, 1), *[e for t in T for e in ran(t, "passed")], {"kind": "done"}]
    mp = {"impl": "mpich", "n": 1, "file": "test_x", **suite.file_result([attempt({0: ok})], 1)}
    agg = suite.aggregate([fm, mp])
    assert agg["totals"]["mpich"]["1"]["passed"] == 4 and agg["totals"]["fmpi"]["1"]["errors"] == 1
    (cause,) = agg["causes"]["fmpi"]
    assert (cause["count"], cause["weight"], cause["exc_type"]) == (1, 4, "AttributeError")
    assert "mpich" not in agg["causes"]
    md = suite.markdown({"meta": {"mpi4py_version": "4.1.2", "date": "now", "argv": ""}, "results": [fm, mp], "aggregate": agg})
    assert "| fmpi | 1 | 1 | 0 | 1 | 0 | 0 | 1 | 0 | 0 | 0 |" in md
    assert "get_vendor" in md and "## Per file, N = 1" in md


def test_causes_group_messages_that_differ_only_in_numbers_and_addresses():
    assert suite.normalize_message("3 != 4 at 0x7f00aa") == suite.normalize_message("5 != 16 at 0x1")
    assert suite.normalize_message("no attribute 'LOGICAL1'") == "no attribute 'LOGICAL1'"
    assert suite.normalize_message("rank 1 of 4") == "rank # of #"


def test_without_records_a_dead_job_is_still_reported(tmp_path):
    res = suite.file_result([attempt({}, returncode=127, log_tail=["fmpirun: cannot start 'python'"])], 2)
    assert res["status"] == "crash" and res["counts"]["errors"] == 1
    assert res["tests"]["<job>"]["message"] == "fmpirun: cannot start 'python'"


def test_file_patterns_are_substrings_or_globs(tmp_path):
    for name in ("test_p2p_obj.py", "test_p2p_buf.py", "test_status.py", "mpiunittest.py"):
        (tmp_path / name).write_text("")
    assert suite.list_files(tmp_path, ["p2p"]) == ["test_p2p_buf", "test_p2p_obj"]
    assert suite.list_files(tmp_path, ["test_s*"]) == ["test_status"]
    assert suite.list_files(tmp_path, []) == ["test_p2p_buf", "test_p2p_obj", "test_status"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ns", "1,x"], "--ns must be comma-separated"),
        (["--ns", "0"], "--ns must be comma-separated positive"),
        (["--timeout", "-3"], "positive number of seconds"),
        (["--no-fmpi", "--no-mpich"], "leaves nothing to run"),
        (["--resume"], "--resume needs --json"),
        (["--sdist", "/nonexistent.tar.gz"], "no such file"),
    ],
)
def test_usage_errors_exit_2_with_one_message(args, message):
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert [line for line in proc.stderr.splitlines() if "error:" in line] and "Traceback" not in proc.stderr


def test_a_hung_job_is_killed_with_the_ranks_in_sessions_of_their_own(tmp_path, monkeypatch):
    """A stand-in launcher that, like fmpirun, starts its 'rank' in a new session: the rank begins a
    test and sleeps. The stall watchdog must report the hang and kill the rank too."""
    pidfile = tmp_path / "rank.pid"
    rank = (
        "import json, os, sys, time; out = sys.argv[1]\n"
        f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        "f = open(os.path.join(out, 'rank0.jsonl'), 'a')\n"
        "f.write(json.dumps({'kind': 'start', 'tests': ['t.A.a', 't.A.b']}) + '\\n')\n"
        "f.write(json.dumps({'kind': 'begin', 'test': 't.A.a'}) + '\\n'); f.flush()\n"
        "time.sleep(600)\n"
    )
    launcher = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {rank!r}, sys.argv[1]], start_new_session=True); time.sleep(600)"

    def fake_argv(impl, n, worker_args, mpiexec):
        return [sys.executable, "-c", launcher, worker_args[worker_args.index("--outdir") + 1]]

    monkeypatch.setattr(suite, "launch_argv", fake_argv)
    t0 = time.monotonic()
    att = suite.run_attempt("fmpi", 1, "t", tmp_path, tmp_path / "work", set(), timeout=60, stall=2, done_grace=5, mpiexec="", attempt=0)
    assert time.monotonic() - t0 < 30
    assert att["status"] == "stall"
    comb = suite.combine_attempt(att, 1)
    assert comb["culprit"] == "t.A.a" and comb["tests"]["t.A.a"]["outcome"] == "hang"
    pid = int(pidfile.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


@pytest.mark.slow
def test_the_runner_on_two_small_files_of_mpi4pys_suite(tmp_path):
    """Downloads the sdist once (cache: $FMPI_SUITE_CACHE or ~/.cache/fmpi/mpi4py-suite) and runs test_status and
    test_p2p_obj at N = 1, 2 under fmpirun and MPICH."""
    out = tmp_path / "r.json"
    md = tmp_path / "r.md"
    cmd = [sys.executable, str(SCRIPT), "--ns", "1,2", "--files", "test_status.py,test_p2p_obj.py", "--timeout", "240", "--stall", "60",
           "--json", str(out), "--markdown", str(md)]
    if os.environ.get("FMPI_SUITE_CACHE"):
        cmd += ["--cache", os.environ["FMPI_SUITE_CACHE"]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[1/8] fmpi  N=1 test_p2p_obj" in proc.stdout  # progress on stdout
    report = json.loads(out.read_text())
    assert set(report) == {"meta", "results", "aggregate"}
    assert set(report["aggregate"]) == {"totals", "causes", "skips"}
    by = {(r["impl"], r["n"], r["file"]): r for r in report["results"]}
    assert set(by) == {(i, n, f) for i in ("fmpi", "mpich") for n in (1, 2) for f in ("test_status", "test_p2p_obj")}
    for r in by.values():
        assert set(r["counts"]) == set(suite.COUNT_KEYS) and r["tests"]
        assert set(r) >= {"impl", "n", "file", "status", "attempts", "duration", "counts", "tests", "mpi"}
    for n in (1, 2):
        # The reference passes these files whole; fmpi passes most of test_status.
        mp = by[("mpich", n, "test_p2p_obj")]
        assert mp["status"] == "ok" and mp["counts"]["passed"] > 50 and mp["counts"]["failed"] + mp["counts"]["errors"] == 0
        assert by[("mpich", n, "test_status")]["counts"]["passed"] > 5
        assert by[("fmpi", n, "test_status")]["counts"]["passed"] > 0
        # Each launcher really ran its own MPI.
        assert "shim" in by[("fmpi", n, "test_status")]["mpi"]["mpi4py_file"]
        assert "shim" not in by[("mpich", n, "test_status")]["mpi"]["mpi4py_file"]
        assert "MPICH" in by[("mpich", n, "test_status")]["mpi"]["library"]
    assert report["aggregate"]["totals"]["mpich"]["2"]["passed"] > 50
    text = md.read_text()
    assert "## Totals" in text and "| test_p2p_obj |" in text


FAKE_MPI = """
class _Comm:
    def Get_rank(self): return 0
    def Get_size(self): return 1
COMM_WORLD = _Comm()
def Get_library_version(): return "FakeMPI 1.0"
"""

FAKE_TESTS = """
import unittest
from mpi4py import MPI

class TestSub(unittest.TestCase):
    def test_sub_fails(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertNotEqual(i, 1)
    def test_sub_skips(self):
        with self.subTest(i=0):
            self.skipTest("no feature")
    def test_sub_passes(self):
        for i in range(2):
            with self.subTest(i=i):
                pass
    def test_plain_error(self):
        MPI.get_vendor()
    @unittest.skip("never")
    def test_skipped(self):
        pass

class TestBrokenClass(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        raise RuntimeError("class setup")
    def test_never(self):
        pass
"""


def test_the_worker_records_subtests_skips_and_class_setup_errors(tmp_path):
    """The worker itself, on a stand-in mpi4py: each test ends once, with the outcome unittest meant."""
    (tmp_path / "fake" / "mpi4py").mkdir(parents=True)
    (tmp_path / "fake" / "mpi4py" / "__init__.py").write_text("")
    (tmp_path / "fake" / "mpi4py" / "MPI.py").write_text(FAKE_MPI)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_fake.py").write_text(FAKE_TESTS)
    (tmp_path / "t" / "test_bad.py").write_text("from mpi4py import MPI\nMPI.get_vendor()\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake")}
    results = {}
    for module in ("test_fake", "test_bad"):
        out = tmp_path / module
        out.mkdir()
        proc = subprocess.run([sys.executable, str(SCRIPT), "_worker", "--testdir", str(tmp_path / "t"), "--module", module, "--outdir", str(out)],
                              capture_output=True, text=True, timeout=60, env=env)
        assert proc.returncode == 0, proc.stderr
        ranks = suite.read_rank_files(out)
        assert list(ranks) == [0] and ranks[0][0]["library"] == "FakeMPI 1.0"
        results[module] = suite.file_result([attempt(ranks)], 1)
    tests = results["test_fake"]["tests"]
    short = {t.removeprefix("test_fake."): e["outcome"] for t, e in tests.items()}
    assert short == {
        "TestBrokenClass.test_never": "notrun",
        "TestSub.test_plain_error": "error",
        "TestSub.test_skipped": "skipped",
        "TestSub.test_sub_fails": "failure",
        "TestSub.test_sub_passes": "passed",
        "TestSub.test_sub_skips": "skipped",
        "setUpClass (test_fake.TestBrokenClass)": "error",
    }
    assert tests["test_fake.TestSub.test_plain_error"]["exc_type"] == "AttributeError"
    assert "!= 1" in tests["test_fake.TestSub.test_sub_fails"]["message"] or "1 == 1" in tests["test_fake.TestSub.test_sub_fails"]["message"]
    bad = results["test_bad"]
    assert bad["status"] == "import-error" and list(bad["tests"]) == ["test_bad.<import>"]
    assert "get_vendor" in bad["tests"]["test_bad.<import>"]["message"]
