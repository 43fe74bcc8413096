"""The Lambda backend's parts on their own: event format, invocation tree, output forwarding, packaging, handler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from lambda_testing import HERE, PROGRAMS
from tests_support import unset_for_the_test

from fmpi.lambda_runtime.event import (
    EventError,
    Fanout,
    Program,
    RankEvent,
    split,
)
from fmpi.lambda_runtime.fanout import choose_arity, heads
from fmpi.lambda_runtime.handler import InvalidRankEvent, handler
from fmpi.lambda_runtime.output import CHUNK, ForwardedOutput, ForwardingStream
from fmpi.launcher.lambda_backend import packaging
from fmpi.launcher.lambda_backend.options import UsageError, resolve_program
from fmpi.rank.spec import RankSpec

TOKEN = "t" * 24


def _event(**overrides) -> dict:
    spec = RankSpec("job1", 1, 4, "tcp://relay:7000", TOKEN)
    event = RankEvent(spec, Program(script="app.py", args=("a", "b")), time.time() + 60).to_event()
    event.update(overrides)
    return {k: v for k, v in event.items() if v is not None}


# ------------------------------------------------------------------ event


def test_event_round_trip():
    event = _event()
    parsed = RankEvent.from_event(json.loads(json.dumps(event)))
    assert parsed.to_event() == event
    assert parsed.program.argv == ["app.py", "a", "b"]


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"fmpi": None}, "not an fmpi rank event"),
        ({"token": None}, "lacks token"),
        ({"rank": 9}, "rank 9 is outside a world of 4"),
        ({"rank": -2}, "rank -2 is outside a world of 4"),  # (-1: a spare, fmpirun --spare)
        ({"rank": True}, "rank must be an integer"),
        ({"size": "many"}, "invalid rank event"),
        ({"token": "short"}, "token is missing or too short"),
        ({"deadline": None}, "lacks 'deadline'"),
        ({"program": None}, "lacks 'program'"),
        ({"program": {"script": "/etc/passwd"}}, "relative path"),
        ({"program": {"script": "a.py", "module": "m"}}, "exactly one of"),
        ({"program": {"module": "not a module"}}, "is not a module name"),
        ({"program": {"script": "a.py", "args": [1]}}, "list of strings"),
        ({"fanout": {"ranks": [0, 4]}}, "starts at 0, but this is rank 1"),
        ({"fanout": {"ranks": [1, 9]}}, "beyond the world of 4"),
        ({"fanout": "yes"}, "fanout must be"),
    ],
)
def test_malformed_events_are_refused_with_one_message(overrides, words):
    with pytest.raises(EventError, match=words.replace("(", r"\(").replace("'", ".")):
        RankEvent.from_event(_event(**overrides))


def test_handler_raises_a_clean_function_error_on_a_bad_event():
    with pytest.raises(InvalidRankEvent, match="not an fmpi rank event") as info:
        handler({"ping": False}, None)
    assert info.value.__cause__ is None and info.value.__suppress_context__


@pytest.mark.parametrize("n, arity", [(n, k) for n in (1, 2, 7, 64, 100) for k in (1, 2, 3, 16)] + [(1024, 16)])
def test_invocation_tree_covers_every_rank_once(n, arity):
    base = RankEvent(RankSpec("j", 0, n, "tcp://r:1", TOKEN), Program(script="a.py"), 0.0)
    invoked, depth = [], 0
    level = heads(base, n, arity)
    while level:
        depth += 1
        invoked += [e.spec.rank for e in level]
        level = [e.for_subtree(c) for e in level if e.fanout for c in e.fanout.children()]
    assert sorted(invoked) == list(range(n))
    assert len(heads(base, n, arity)) <= arity
    if arity == 16 and n == 1024:
        assert depth <= 4


def test_tree_events_get_fresh_incarnations():
    base = RankEvent(RankSpec("j", 0, 8, "tcp://r:1", TOKEN), Program(script="a.py"), 0.0)
    events = heads(base, 8, 0)
    assert len({e.spec.incarnation for e in events}) == 8
    assert [e.spec.rank for e in events] == list(range(8))
    assert all(e.fanout is None for e in events)


def test_choose_arity():
    assert choose_arity(8, None) == 0 and choose_arity(1024, None) > 0
    assert choose_arity(8, 2) == 2 and choose_arity(1024, 0) == 0


def test_split():
    assert [(f.lo, f.hi) for f in split(0, 10, 3)] == [(0, 3), (3, 6), (6, 10)]
    assert split(5, 5, 3) == []
    assert Fanout(0, 1, 2).children() == []


# ----------------------------------------------------------------- output


def test_forwarding_batches_until_flush_or_a_full_chunk():
    sent = []
    stream = ForwardingStream("stdout", lambda name, text: sent.append((name, text)), None)
    stream.write("hello ")
    stream.write("world\nand more")
    assert sent == []  # held for at most FLUSH_INTERVAL (the ticker of ForwardedOutput)
    stream.flush()
    assert sent == [("stdout", "hello world\nand more")]
    stream.buffer.write("bytes too\n".encode())
    stream.flush()
    assert sent[-1] == ("stdout", "bytes too\n")
    stream.write("x" * (2 * CHUNK + 5))  # a long write goes out at once, in frames of CHUNK
    assert [len(t) for _, t in sent[-3:]] == [CHUNK, CHUNK, 5]


def test_forwarded_output_is_sent_within_the_flush_interval():
    sent = []
    with ForwardedOutput(lambda name, text: sent.append((name, text))):
        print("soon")
        deadline = time.monotonic() + 2
        while not sent and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sent == [("stdout", "soon\n")]


def test_forwarded_output_swaps_and_restores_sys_streams():
    sent = []
    saved = sys.stdout, sys.stderr
    with ForwardedOutput(lambda name, text: sent.append((name, text))):
        print("to stdout")
        print("to stderr", file=sys.stderr, end="")
    assert (sys.stdout, sys.stderr) == saved
    assert ("stdout", "to stdout\n") in sent and ("stderr", "to stderr") in sent


def test_forwarding_survives_a_dead_relay():
    def broken(name, text):
        raise OSError("relay gone")

    stream = ForwardingStream("stdout", broken, None)
    assert stream.write("still fine\n") == len("still fine\n")


# -------------------------------------------------------------- packaging


def _code(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "main.py").write_text("print('hi')\n")
    (code / "pkg" / "__init__.py").write_text("")
    (code / "run.sh").write_text("#!/bin/sh\n")
    (code / "run.sh").chmod(0o755)
    for skipped in (".git", "__pycache__", "myenv"):
        (code / skipped).mkdir()
        (code / skipped / "junk.py").write_text("junk\n")
    (code / "myenv" / "pyvenv.cfg").write_text("home = /usr\n")
    return code


def test_bundle_is_deterministic_and_cached(tmp_path):
    code = _code(tmp_path)
    first = packaging.build_bundle(code, vendor=False, cache_dir=tmp_path / "cache")
    second = packaging.build_bundle(code, vendor=False, cache_dir=tmp_path / "cache2")
    assert not first.cached and not second.cached
    assert first.code_sha256 == second.code_sha256  # same files, same bytes
    again = packaging.build_bundle(code, vendor=False, cache_dir=tmp_path / "cache")
    assert again.cached and again.path == first.path
    (code / "main.py").write_text("print('changed')\n")
    changed = packaging.build_bundle(code, vendor=False, cache_dir=tmp_path / "cache")
    assert changed.digest != first.digest and changed.code_sha256 != first.code_sha256


def test_bundle_layout(tmp_path):
    bundle = packaging.build_bundle(_code(tmp_path), vendor=False, cache_dir=tmp_path / "cache")
    with zipfile.ZipFile(bundle.path) as zf:
        names = set(zf.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in zf.infolist()}
        manifest = json.loads(zf.read("fmpi_bundle.json"))
    assert {"app/main.py", "app/pkg/__init__.py", "fmpi/lambda_runtime/handler.py",
            "fmpi/rank/shim/mpi4py/MPI.py", "fmpi/MPI.py"} <= names
    assert not any(part in n for n in names for part in (".git/", "myenv/", "junk"))
    tag = sys.implementation.cache_tag
    # every module compiled (the task root is read-only: Python could not cache them there) ...
    assert {f"app/__pycache__/main.{tag}.pyc", f"app/pkg/__pycache__/__init__.{tag}.pyc",
            f"fmpi/transport/__pycache__/engine.{tag}.pyc"} <= names
    py = {n for n in names if n.endswith(".py")}
    assert {n for n in names if n.endswith(".pyc")} == {
        f"{n.rpartition('/')[0]}/__pycache__/{n.rpartition('/')[2][:-3]}.{tag}.pyc" for n in py}
    assert not any(n.startswith("numpy/") for n in names)  # vendor=False
    assert modes["app/run.sh"] == 0o755 and modes["app/main.py"] == 0o644
    assert manifest["code_dir"] == "code" and manifest["vendored"] == {}


def test_bundle_modules_import_from_a_read_only_task_root_without_compiling(tmp_path):
    """What a cold start on Lambda does: extract the zip where nothing can be written, import from it."""
    code = _code(tmp_path)
    (code / "pkg" / "__init__.py").write_text("VALUE = 42\n")
    (code / "broken.py").write_text("def (:\n")  # not compilable: left out of the compiled modules, zipped as is
    bundle = packaging.build_bundle(code, vendor=False, cache_dir=tmp_path / "cache")
    root = tmp_path / "task"
    with zipfile.ZipFile(bundle.path) as zf:
        zf.extractall(root)
        pyc = zf.read(f"app/pkg/__pycache__/__init__.{sys.implementation.cache_tag}.pyc")
        assert "app/broken.py" in zf.namelist()
        assert not any("broken" in n and n.endswith(".pyc") for n in zf.namelist())
    assert int.from_bytes(pyc[4:8], "little") == 0b01  # PEP 552: hash-based, not checked against the source
    # sources dated anything (the extractor's choice), and no way to write a cache: imports must use the .pyc
    for path in root.rglob("*"):
        os.utime(path, (86400.0 * 365 * 40, 86400.0 * 365 * 40))
    probe = ("import sys, importlib.util, importlib.machinery as m\n"
             "compiled = []\n"
             "orig = m.SourceFileLoader.source_to_code\n"
             "m.SourceFileLoader.source_to_code = lambda self, data, path, **kw: compiled.append(path) or orig(self, data, path, **kw)\n"
             "sys.path[:0] = [sys.argv[1] + '/app', sys.argv[1]]\n"
             "import pkg, fmpi.MPI\n"
             "assert fmpi.MPI.__file__.startswith(sys.argv[1]), fmpi.MPI.__file__\n"
             "print(pkg.VALUE, [p for p in compiled if p.startswith(sys.argv[1])])\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # as good as read-only for the import system
    result = subprocess.run([sys.executable, "-c", probe, str(root)], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "42 []", result.stdout


def test_bundle_vendors_what_the_runtime_lacks(tmp_path, bundle_cache):
    bundle = packaging.build_bundle(_code(tmp_path), cache_dir=bundle_cache / "lambda")
    with zipfile.ZipFile(bundle.path) as zf:
        names = zf.namelist()
        manifest = json.loads(zf.read("fmpi_bundle.json"))
    assert {"numpy", "aws-lambda-powertools", "typing-extensions"} <= set(manifest["vendored"])
    assert "boto3" not in manifest["vendored"] and not any(n.startswith("boto3/") for n in names)
    assert any(n.startswith("numpy/") for n in names) and any(n.startswith("aws_lambda_powertools/") for n in names)


def test_zip_over_the_upload_limit_is_built_for_s3(tmp_path, monkeypatch):
    code = _code(tmp_path)
    (code / "data.bin").write_bytes(os.urandom(64 * 1024))
    monkeypatch.setenv(packaging.ZIP_LIMIT_ENV, str(32 * 1024))
    bundle = packaging.build_bundle(code, vendor=False, cache_dir=tmp_path / "cache")  # deploy sends it through S3
    assert bundle.zipped_size > packaging.direct_upload_limit() == 32 * 1024


# ---------------------------------------------------------------- program


def test_resolve_program(tmp_path):
    script = PROGRAMS / "hello.py"
    program, code = resolve_program(["python", "-u", str(script), "x"], None)
    assert program == Program(script="hello.py", args=("x",)) and code == PROGRAMS
    program, code = resolve_program([str(script)], str(HERE))
    assert program.script == "programs/hello.py" and code == HERE
    program, code = resolve_program(["python3", "-m", "pkg.mod", "--flag"], str(tmp_path))
    assert program == Program(module="pkg.mod", args=("--flag",)) and code == tmp_path


@pytest.mark.parametrize(
    "command, words",
    [
        (["hostname"], "run Python programs"),
        (["python", "missing.py"], "script not found"),
        (["python", "-c", "print(1)"], "not supported"),
        ([], "no program given"),
    ],
)
def test_resolve_program_refuses(command, words):
    with pytest.raises(UsageError, match=words):
        resolve_program(command, None)


def test_script_outside_the_code_directory(tmp_path):
    with pytest.raises(UsageError, match="is not inside the code directory"):
        resolve_program(["python", str(PROGRAMS / "hello.py")], str(tmp_path))


# ---------------------------------------------------------- warm sandbox


def test_warm_invocations_do_not_leak_state():
    proc = subprocess.run(
        [sys.executable, str(HERE / "warm_harness.py"), str(PROGRAMS), "leaky.py", "first", "second"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    after = next(json.loads(line[6:]) for line in proc.stdout.splitlines() if line.startswith("AFTER "))
    assert [r["summary"]["status"] for r in results] == ["finished", "finished"]
    first, second = (r["output"] for r in results)
    assert "'counter': 1" in first and "'argv': ['first']" in first
    # The second run sees a fresh helper module, no environment change, fresh __main__ and argv.
    assert "'counter': 1" in second and "'env': None" in second and "'main_marker': None" in second
    assert "'argv': ['second']" in second and "'world': 1" in second
    assert after == {
        "argv_restored": True, "cwd_restored": True, "path_restored": True, "mpi_facade_cached": False,
        "user_modules_cached": [], "initialized": False, "token_in_environment": False,
    }
    # The rank logger (powertools, service "fmpi-rank") writes JSON lines to the process's stdout. Split
    # them at the RESULT lines: each invocation's lines must carry its own job id and rank, so a warm
    # sandbox's second job never logs under the first job's keys (append_keys is process-wide state).
    per_invocation: list[list[dict]] = [[]]
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            per_invocation.append([])
        elif line.startswith("{"):
            record = json.loads(line)
            if record.get("service") == "fmpi-rank":
                per_invocation[-1].append(record)
    assert per_invocation[-1] == []  # nothing logged after the last invocation returned
    jobs = [r["summary"]["job"] for r in results]
    assert jobs[0] != jobs[1]
    for job, records, result in zip(jobs, per_invocation, results):
        assert {"rank invoked", "joined the job", "program finished"} <= {r["message"] for r in records}, records
        for record in records:
            assert (record.get("job"), record.get("rank")) == (job, result["summary"]["rank"]), record


# ----------------------------------------------------------------- fan-out


class _FakeLambda:
    def __init__(self, fail_rank: int | None = None) -> None:
        self.fail_rank = fail_rank
        self.calls: list[int] = []

    def invoke(self, FunctionName, InvocationType, Payload):  # noqa: N803 - boto3's names
        from botocore.exceptions import ClientError

        rank = json.loads(Payload)["rank"]
        self.calls.append(rank)
        assert InvocationType == "Event"
        if rank == self.fail_rank:
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}, "Invoke")
        return {"StatusCode": 202}


def test_invoke_all_reports_failures_by_rank_and_stops():
    from fmpi.lambda_runtime.fanout import invoke_all

    base = RankEvent(RankSpec("j", 0, 40, "tcp://r:1", TOKEN), Program(script="a.py"), 0.0)
    invoked = []
    fake = _FakeLambda(fail_rank=0)
    failed = invoke_all(fake, "fn", heads(base, 40, 0), lambda ev, _id: invoked.append(ev.spec.rank), workers=1)
    assert "cannot invoke rank 0: access denied (not allowed)" in failed[0]
    assert len(failed) == 40 and not invoked  # after the first failure nothing more is attempted
    assert fake.calls == [0]
    fine = _FakeLambda()
    assert invoke_all(fine, "fn", heads(base, 40, 0), lambda ev, _id: invoked.append(ev.spec.rank)) == {}
    assert sorted(invoked) == list(range(40))


# ---------------------------------------------------------------- backends


def test_localstack_backend_defaults_to_localhost_4566(monkeypatch):
    from fmpi.launcher.lambda_backend import aws

    # Nothing from this machine may choose the endpoint, the region or the credentials.
    # (connect() also sets some of them for the rest of the process: monkeypatch puts them back afterwards)
    unset_for_the_test(monkeypatch, "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_LAMBDA", "AWS_REGION", "AWS_DEFAULT_REGION",
                       "AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    target = aws.connect("localstack", None, None, None)
    client = target.client("lambda")  # boto3 resolves the endpoint when it builds the client; no call is made
    assert client.meta.endpoint_url == "http://localhost:4566"
    assert client.meta.region_name == "us-east-1"
    assert target.session.get_credentials().access_key == "test"
    # AWS_ENDPOINT_URL, when set, wins over the default (it is how the LocalStack stage points elsewhere).
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4510")
    assert aws.connect("localstack", None, None, None).client("lambda").meta.endpoint_url == "http://127.0.0.1:4510"
    # ... and so does every client made later in the process, without a Target (the checkpoint store's)
    import boto3

    assert boto3.client("s3").meta.endpoint_url == "http://127.0.0.1:4510"
    assert boto3.client("s3").meta.region_name == "us-east-1"


@pytest.mark.parametrize("n, k, arity", [(n, k, a) for n in (1, 5, 8, 100) for k in (2, 3, 6) for a in (0, 1, 2, 16)])
def test_invocations_of_several_ranks_cover_every_rank_once(n, k, arity):
    """--ranks-per-function K: ceil(N/K) invocations (direct or through the tree), each running ranks r..r+K-1."""
    base = RankEvent(RankSpec("j", 0, n, "tcp://r:1", TOKEN), Program(script="a.py"), 0.0, per_function=k)
    invoked, level = [], heads(base, n, arity)
    while level:
        invoked += level
        level = [e.for_subtree(c) for e in level if e.fanout for c in e.fanout.children()]
    assert len(invoked) == -(-n // k)
    assert sorted(r for e in invoked for r in e.local_ranks) == list(range(n))
    assert all(RankEvent.from_event(e.to_event()).local_ranks == e.local_ranks for e in invoked)
    sibling = invoked[0].for_sibling(1) if n > 1 else None
    assert sibling is None or (list(sibling.local_ranks) == [1] and sibling.fanout is None)


def test_default_ranks_per_function_is_one_per_vcpu():
    from argparse import Namespace

    from fmpi.launcher.lambda_backend.options import ranks_per_function

    def k(memory, spare=0, given=None):
        return ranks_per_function(Namespace(memory=memory, spare=spare, ranks_per_function=given))

    assert [k(m) for m in (128, 1769, 3538, 5307, 7076, 10240)] == [1, 1, 2, 3, 4, 6]
    assert k(10240, spare=1) == 1 and k(1769, given=4) == 4


def test_warm_invocations_of_several_ranks_leave_no_process_behind():
    """--ranks-per-function 3 in one warm process, twice: each invocation's two sibling processes run their
    ranks (their output reaches the launcher) and are reaped before the handler returns."""
    proc = subprocess.run(
        [sys.executable, str(HERE / "warm_harness.py"), str(PROGRAMS), "leaky.py", "first", "second"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "WARM_PER_FUNCTION": "3"},
    )
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(results) == 2, proc.stdout + proc.stderr
    for result, arg in zip(results, ("first", "second")):
        assert result["summary"]["status"] == "finished", result
        assert result["summary"]["siblings"] == {"1": 0, "2": 0}, result
        seen = [line for line in result["output"].splitlines() if line.startswith("SEEN")]
        assert len(seen) == 3 and all("'world': 3" in s and f"'argv': ['{arg}']" in s for s in seen), result["output"]
        assert result["children"] == [], "a sibling process outlived its invocation"
