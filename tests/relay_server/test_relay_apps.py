"""An iterative app over every relay kind, checked against the direct channel (issue 5: "an iterative app").

apps/kmeans.py (Bcast, then one Allreduce per iteration) runs under
``fmpirun -n 4 --channel relay`` on (a) the relay fmpirun embeds, (b) a real
redis-server, (c) two sharded fmpi-relay processes, and its result line and
saved centroids must be identical to the run over direct links (the app is
deterministic: exact centroid sums, fixed-point inertia). The Redis job must
leave no key behind. The slow stage adds logistic regression (float sums:
equal within rounding, as tests/apps/test_apps.py checks).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests_support import REPO, fmpirun_argv

APPS = REPO / "apps"
N = 4
KMEANS = ["--points", "6000", "--block", "1000"]
LOGREG = ["--points", "6000"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"  # 4 ranks on 2 cores: no BLAS thread pools
    env.pop("FMPI_CHANNEL", None)
    return env


def _run(app: str, args: list[str], save: Path, *extra: str) -> tuple[str, np.ndarray, str]:
    """(the app's result line, its saved array, fmpirun's stderr) of one run at N ranks."""
    argv = fmpirun_argv("-n", str(N), "-v", *extra, sys.executable, str(APPS / f"{app}.py"), *args, "--save", str(save))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=_env())
    assert proc.returncode == 0, f"{app} with {extra} failed:\n{proc.stderr[-3000:]}"
    lines = [line for line in proc.stdout.splitlines() if line.startswith(f"{app} ")]
    assert len(lines) == 1, proc.stdout
    return lines[0], np.load(save), proc.stderr


def _links(stderr: str, required: bool = True) -> dict[str, int]:
    """fmpirun's links summary; a job whose collectives all ran on the relay made no link and prints none."""
    m = re.search(r"links: (\d+) \((\d+) direct, (\d+) punched, (\d+) relayed\)", stderr)
    if m is None and not required:
        return {"total": 0, "direct": 0, "punched": 0, "relayed": 0}
    assert m, f"no links summary:\n{stderr[-2000:]}"
    return dict(zip(("total", "direct", "punched", "relayed"), map(int, m.groups())))


def _fields(line: str) -> dict[str, str]:
    return dict(token.split("=", 1) for token in line.split()[1:] if "=" in token)


@pytest.fixture(scope="module")
def direct_results(tmp_path_factory):
    """The reference runs over direct links, once per module: {app: (line, array)}."""
    out: dict = {}
    tmp = tmp_path_factory.mktemp("direct")

    def get(app: str, args: list[str]):
        if app not in out:
            line, array, stderr = _run(app, args, tmp / f"{app}.npy", "--channel", "direct")
            links = _links(stderr)
            assert links["relayed"] == 0 and links["direct"] > 0, stderr
            out[app] = (line, array)
        return out[app]

    return get


@pytest.fixture
def relay_urls(request, redis_server, relay_process):
    """relay kind -> the fmpirun options that select it."""

    def options(kind: str) -> tuple[str, ...]:
        if kind == "embedded":
            return ()
        if kind == "redis":
            return ("--relay", redis_server[0])
        if kind == "sharded":
            a, b = relay_process(), relay_process()
            host_b, port_b = b.address
            return ("--relay", f"{a.url},{host_b}:{port_b}")  # tcp://a:P,b:Q: rendezvous on a, objects over both
        raise ValueError(kind)

    return options


def _no_redis_keys(redis_server) -> list[bytes]:
    return list(redis_server[1].scan_iter(match="fmpi:*", count=1000))


@pytest.mark.parametrize("kind", ["embedded", "redis", "sharded"])
def test_kmeans_over_relay_matches_direct(kind, direct_results, relay_urls, redis_server, tmp_path):
    ref_line, ref_centroids = direct_results("kmeans", KMEANS)
    line, centroids, stderr = _run("kmeans", KMEANS, tmp_path / "c.npy", "--channel", "relay", *relay_urls(kind))
    links = _links(stderr)
    assert links["direct"] == 0 and links["punched"] == 0, stderr  # every link went through the relay
    assert line == ref_line  # bit-identical: exact centroid sums, fixed-point inertia
    assert np.array_equal(centroids, ref_centroids)
    if kind == "redis":
        assert not _no_redis_keys(redis_server), "the job left keys in Redis"
        assert "pw-for-tests" not in stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["embedded", "redis", "sharded"])
def test_logreg_over_relay_matches_direct(kind, direct_results, relay_urls, redis_server, tmp_path):
    ref_line, ref_w = direct_results("logreg", LOGREG)
    line, w, stderr = _run("logreg", LOGREG, tmp_path / "w.npy", "--channel", "relay", *relay_urls(kind))
    links = _links(stderr, required=False)  # Allreduce only: over a relay it runs server-side, no link at all
    assert links["direct"] == links["punched"] == 0, stderr
    ours, ref = _fields(line), _fields(ref_line)
    for key in ("loss", "weightnorm"):
        assert math.isclose(float(ours[key]), float(ref[key]), rel_tol=1e-9), (key, line, ref_line)
    assert abs(int(ours["correct"]) - int(ref["correct"])) <= 1
    np.testing.assert_allclose(w, ref_w, rtol=1e-8, atol=1e-10)
    if kind == "redis":
        assert not _no_redis_keys(redis_server)
