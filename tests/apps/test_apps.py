"""The apps/ templates run unchanged under real MPICH (mpiexec + mpi4py) and fmpirun, and compute the right thing.

Every app runs at N = 1, 3 and 4 under both launchers with small flags. Their result lines must match
(exactly for the deterministic apps, within rounding for the two gradient-descent ones), and the arrays
they save (--save) must equal an independent single-process numpy computation of the same problem,
which also shows the results do not depend on N.
"""

from __future__ import annotations

import ast
import itertools
import math
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from tests_support import REPO, load_script

APPS = REPO / "apps"

synthetic = load_script("apps/synthetic.py", "fmpi_apps_synthetic")

SIZES = [1, 3, 4]


@pytest.fixture(autouse=True)
def _one_blas_thread(monkeypatch):
    # Up to 4 ranks share 2 cores: BLAS thread pools per rank would only oversubscribe them.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, "1")


# ---------------------------------------------------------------- running and parsing


def _result(run, app: str, n: int) -> str:
    assert run.returncode == 0, f"{app} at N={n} failed:\n{run.stderr[-3000:]}"
    lines = run.lines()
    prefix = "pi ~=" if app == "pi" else f"{app} "
    results = [line for line in lines if line.startswith(prefix)]
    assert len(results) == 1, f"expected one result line from {app}, got:\n{run.stdout}"
    assert any(line.startswith("time ") for line in lines), f"no timing line from {app}:\n{run.stdout}"
    return results[0]


def _fields(line: str) -> dict[str, str]:
    return dict(token.split("=", 1) for token in line.split()[1:] if "=" in token)


def _run_both(fmpi, mpich, tmp_path: Path, app: str, n: int, args: list[str], save: bool = True):
    """(mpich line, fmpi line, mpich saved array, fmpi saved array) of one app at N ranks."""
    lines, arrays = [], []
    for name, launcher in (("mpich", mpich), ("fmpi", fmpi)):
        out = tmp_path / f"{app}-{name}-{n}.npy"
        run = launcher(n, APPS / f"{app}.py", *args, *(["--save", str(out)] if save else []))
        lines.append(_result(run, app, n))
        arrays.append(np.load(out) if save else None)
    return (*lines, *arrays)


def _close(a: str, b: str, rel: float) -> bool:
    return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=0.0)


# ---------------------------------------------------------------- single-process references


@cache
def kmeans_reference(points: int, k: int = 25, iterations: int = 10, seed: int = 1):
    x, _ = synthetic.blobs(seed, 0, points, 100)
    c = x[:k].copy()
    for _ in range(iterations + 1):
        dist2 = np.stack([((x - cj) ** 2).sum(axis=1) for cj in c], axis=1)
        labels = dist2.argmin(axis=1)
        if _ == iterations:
            break
        for j in range(k):
            members = x[labels == j]
            if len(members):
                c[j] = members.sum(axis=0) / len(members)
    return c, float(dist2.min(axis=1).sum())


@cache
def logreg_reference(points: int, iterations: int = 100, lr: float = 1.0, l2: float = 1e-4, seed: int = 1):
    x, y = synthetic.logistic(seed, 0, points, 100)
    w, b = np.zeros(100), 0.0
    for _ in range(iterations):
        z = x @ w + b
        p = 1.0 / (1.0 + np.exp(-z))
        loss = np.mean(np.log1p(np.exp(-np.abs(z))) + np.maximum(z, 0) - y * z) + 0.5 * l2 * w @ w
        w, b = w - lr * (x.T @ (p - y) / points + l2 * w), b - lr * np.mean(p - y)
    correct = int(np.count_nonzero((x @ w + b > 0) == (y > 0.5)))
    return np.append(w, b), float(loss), correct


@cache
def mlp_reference(train: int, test: int, batch: int, epochs: int, lr=0.1, momentum=0.9, seed=1, f=16, h=64, c=4):
    rng = np.random.default_rng(seed)
    w1, b1 = rng.standard_normal((f, h)) * np.sqrt(2.0 / f), np.zeros(h)
    w2, b2 = rng.standard_normal((h, c)) * np.sqrt(2.0 / h), np.zeros(c)
    params = [w1, b1, w2, b2]
    velocity = [np.zeros_like(q) for q in params]
    for _ in range(epochs):
        for step in range(train // batch):
            x, y = synthetic.teacher(seed, step * batch, batch, f, c)
            hidden = np.maximum(x @ w1 + b1, 0.0)
            logits = hidden @ w2 + b2
            prob = np.exp(logits - logits.max(axis=1, keepdims=True))
            prob /= prob.sum(axis=1, keepdims=True)
            delta = (prob - np.eye(c)[y]) / batch
            dhidden = (delta @ w2.T) * (hidden > 0)
            grads = [x.T @ dhidden, dhidden.sum(axis=0), hidden.T @ delta, delta.sum(axis=0)]
            for q, v, g in zip(params, velocity, grads):
                v *= momentum
                v -= lr * g
                q += v
    x, y = synthetic.teacher(seed, train, test, f, c)
    predicted = np.argmax(np.maximum(x @ w1 + b1, 0.0) @ w2 + b2, axis=1)
    return np.concatenate([q.ravel() for q in params]), int(np.count_nonzero(predicted == y))


@cache
def jacobi_reference(nx: int, ny: int, max_sweeps: int, tol: float, check: int) -> tuple[np.ndarray, int, float]:
    """(plate, sweeps done, largest change of the last sweep) of a serial Jacobi run with the app's stopping rule."""
    u = np.zeros((ny + 2, nx + 2))
    u[0, :] = 1.0
    for sweep in range(1, max_sweeps + 1):
        nxt = u.copy()
        nxt[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        change = float(np.abs(nxt - u).max())
        u = nxt
        if (sweep % check == 0 or sweep == max_sweeps) and change < tol:
            break
    return u, sweep, change


# ---------------------------------------------------------------- one test per app and N


@pytest.mark.parametrize("n", SIZES)
def test_pi(n, fmpi, mpich, tmp_path):
    ref, ours, _, _ = _run_both(fmpi, mpich, tmp_path, "pi", n, ["--samples", "200000"], save=False)
    assert ours == ref
    assert abs(float(ours.split()[2]) - math.pi) < 0.02


@pytest.mark.parametrize("n", SIZES)
def test_kmeans(n, fmpi, mpich, tmp_path):
    points = 6000
    args = ["--points", str(points), "--block", "1000"]  # several distance blocks per rank
    ref, ours, ref_c, our_c = _run_both(fmpi, mpich, tmp_path, "kmeans", n, args)
    assert ours == ref  # bit-identical: exact centroid sums, fixed-point inertia
    centroids, inertia = kmeans_reference(points)
    assert np.array_equal(our_c, centroids) and np.array_equal(ref_c, centroids)
    assert _close(_fields(ours)["inertia"], inertia, 1e-9)


@pytest.mark.parametrize("n", SIZES)
def test_logreg(n, fmpi, mpich, tmp_path):
    points = 6000
    ref, ours, ref_w, our_w = _run_both(fmpi, mpich, tmp_path, "logreg", n, ["--points", str(points)])
    ours_f, ref_f = _fields(ours), _fields(ref)
    for key in ("loss", "weightnorm"):
        assert _close(ours_f[key], ref_f[key], 1e-9), key
    assert abs(int(ours_f["correct"]) - int(ref_f["correct"])) <= 1
    weights, loss, correct = logreg_reference(points)
    np.testing.assert_allclose(our_w, weights, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ref_w, weights, rtol=1e-8, atol=1e-10)
    assert _close(ours_f["loss"], loss, 1e-9)
    assert abs(int(ours_f["correct"]) - correct) <= 1
    assert 0.8 < correct / points < 0.95  # the model learned (Bayes accuracy is about 0.87)


@pytest.mark.parametrize("n", SIZES)
def test_jacobi(n, fmpi, mpich, tmp_path):
    nx, ny = 37, 29  # odd sizes: uneven blocks on the 3 x 1 and 2 x 2 process grids
    max_sweeps, tol, check = 400, 2e-3, 7
    args = ["--nx", str(nx), "--ny", str(ny), "--iterations", str(max_sweeps), "--tol", str(tol), "--check", str(check)]
    ref, ours, ref_plate, our_plate = _run_both(fmpi, mpich, tmp_path, "jacobi", n, args)
    assert ours == ref
    plate, sweeps, change = jacobi_reference(nx, ny, max_sweeps, tol, check)
    assert 0 < sweeps < max_sweeps and sweeps % check == 0  # stopped by --tol at a check
    assert np.array_equal(our_plate, plate) and np.array_equal(ref_plate, plate)  # bit for bit
    fields = _fields(ours)
    assert int(fields["sweeps"]) == sweeps and float(fields["lastchange"]) == change
    assert int(fields["heat"]) == int(np.rint(plate[1:-1, 1:-1] * 2.0**32).astype(np.int64).sum())


@pytest.mark.parametrize("n", SIZES)
def test_mlp(n, fmpi, mpich, tmp_path):
    train, test, batch, epochs = 4096, 1024, 128, 2  # 128 rows split 43/43/42 at N=3
    args = ["--train", str(train), "--test", str(test), "--batch", str(batch), "--epochs", str(epochs)]
    ref, ours, ref_p, our_p = _run_both(fmpi, mpich, tmp_path, "mlp", n, args)
    ours_f, ref_f = _fields(ours), _fields(ref)
    for key in ("loss", "paramnorm"):
        assert _close(ours_f[key], ref_f[key], 1e-7), key
    params, correct = mlp_reference(train, test, batch, epochs)
    np.testing.assert_allclose(our_p, params, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ref_p, params, rtol=1e-6, atol=1e-9)
    assert abs(float(ours_f["test_accuracy"]) * test - correct) <= 2
    assert correct / test > 0.75  # the model learned (4 classes: chance is about 0.3)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dist", ["uniform", "skewed"])
def test_samplesort(n, dist, fmpi, mpich, tmp_path):
    keys = 100_003
    args = ["--keys", str(keys), "--dist", dist]
    ref, ours, ref_sorted, our_sorted = _run_both(fmpi, mpich, tmp_path, "samplesort", n, args)
    assert ours == ref
    expected = np.sort(synthetic.keys(1, 0, keys, dist))
    assert np.array_equal(our_sorted, expected) and np.array_equal(ref_sorted, expected)
    fields = _fields(ours)
    assert fields["sorted"] == "yes"
    prime = 2**31 - 1
    residues = [int(k) % prime for k in expected]
    assert int(fields["checksum"]) == sum(residues) % prime
    assert int(fields["fingerprint"]) == sum((i + 1) * r for i, r in enumerate(residues)) % prime


# ---------------------------------------------------------------- templates and the dataset generator


APP_FILES = sorted(p for p in APPS.glob("*.py") if p.name != "synthetic.py")


@pytest.mark.parametrize("path", APP_FILES, ids=lambda p: p.stem)
def test_template_header(path):
    doc = ast.get_docstring(ast.parse(path.read_text()))
    assert doc, f"{path.name} has no header docstring"
    assert "Demonstrates" in doc
    assert "mpiexec -n" in doc and "fmpirun -n" in doc
    assert f"apps/{path.name}" in doc, "the header shows how to run the app"
    assert "from mpi4py import MPI" in path.read_text()


def test_help_lists_flags():
    """--help works for every app (under plain python: singleton MPI, real mpi4py)."""
    for path in APP_FILES:
        proc = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        assert "usage:" in proc.stdout and "--" in proc.stdout


def test_rows_do_not_depend_on_the_split(monkeypatch):
    monkeypatch.setattr(synthetic, "CHUNK_ROWS", 97)  # many generator chunks per call
    whole_x, whole_label = synthetic.blobs(7, 0, 1000, 100)
    parts = [synthetic.blobs(7, s, c, 100) for s, c in (synthetic.partition(1000, 7, r) for r in range(7))]
    assert np.array_equal(np.concatenate([p[0] for p in parts]), whole_x)
    assert np.array_equal(np.concatenate([p[1] for p in parts]), whole_label)
    _, y = synthetic.logistic(7, 0, 500, 100)
    assert np.array_equal(synthetic.logistic(7, 123, 77, 100)[1], y[123:200])
    _, label = synthetic.teacher(7, 0, 500)
    assert np.array_equal(synthetic.teacher(7, 499, 1)[1], label[499:])
    assert np.array_equal(synthetic.keys(7, 10, 5), synthetic.keys(7, 0, 15)[10:])
    monkeypatch.setattr(synthetic, "CHUNK_ROWS", 1 << 15)
    assert np.array_equal(synthetic.blobs(7, 0, 1000, 100)[0], whole_x)
    # Different seeds and datasets give different data.
    assert not np.array_equal(synthetic.keys(8, 0, 15), synthetic.keys(7, 0, 15))


def test_features_sum_exactly_in_any_order():
    x, _ = synthetic.blobs(3, 0, 4000, 100)
    assert np.array_equal(np.rint(x / synthetic.QUANTUM) * synthetic.QUANTUM, x)
    assert np.abs(x).max() < 16
    shuffled = x[np.random.default_rng(0).permutation(len(x))]
    assert np.array_equal(x.sum(axis=0), shuffled.sum(axis=0))
    assert np.array_equal(x.sum(axis=0), x[:1234].sum(axis=0) + x[1234:].sum(axis=0))


def test_partition_and_sizing():
    for total in (0, 1, 10, 1001):
        for size in (1, 3, 4, 7):
            blocks = [synthetic.partition(total, size, r) for r in range(size)]
            assert sum(c for _, c in blocks) == total
            assert all(s + c == nxt for (s, c), (nxt, _) in itertools.pairwise(blocks))
            assert max(c for _, c in blocks) - min(c for _, c in blocks) <= 1
    assert synthetic.points_for_gb(100, 100) == 125_000_000
