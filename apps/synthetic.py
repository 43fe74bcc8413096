"""Synthetic datasets for the apps (`import synthetic`): each rank generates only its own rows, the same for any N.

Row i of a dataset is a pure function of (seed, i). It is drawn from a Philox counter-based generator
whose counter starts at i * (counters per row), so a rank jumps straight to its first row and builds
rows [start, start + count) in O(count) time and memory: nothing is generated twice, nothing is
communicated, and results depend on the dataset size, not on the number of ranks.

The datasets follow the ones used to evaluate stateful serverless systems (CRUCIAL, Cirrus): dense
points with 100 float64 features, sized in GB.

    blobs(seed, start, count)     Gaussian clusters around 25 random centers (k-means)
    logistic(seed, start, count)  points with 0/1 labels from a noisy linear model (logistic regression)
    teacher(seed, start, count)   points labelled by a random "teacher" MLP (MLP training)
    keys(seed, start, count)      int64 sort keys, uniform or skewed (sample sort)
    partition(total, size, rank)  the (start, count) block of rows a rank owns
    points_for_gb(gb, features)   how many points of float64 features make gb gigabytes (1e9 bytes)

Feature values are multiples of QUANTUM = 2**-16 and smaller than 16 in magnitude, so sums of up to
2**33 of them are exact in float64 whatever the summation order: reductions over them (k-means
centroid sums) give bit-identical results on any N and any MPI library.

This module is plain numpy (no MPI) so tests can build the same data in one process.
"""

from __future__ import annotations

import numpy as np

QUANTUM = 2.0**-16
CHUNK_ROWS = 1 << 15  # rows generated per Philox call: bounds the temporary memory per rank

# Independent streams of the same seed (the Philox key is seed + stream * 2**64).
_BLOBS, _LOGISTIC, _TEACHER, _KEYS = 1, 2, 3, 4
_CENTERS, _TRUE_WEIGHTS, _TEACHER_W1, _TEACHER_W2 = 11, 12, 13, 14


def partition(total: int, size: int, rank: int) -> tuple[int, int]:
    """The block of `total` rows that `rank` of `size` owns: (first row, row count); sizes differ by at most 1."""
    base, extra = divmod(total, size)
    return rank * base + min(rank, extra), base + (1 if rank < extra else 0)


def points_for_gb(gb: float, features: int = 100) -> int:
    """Number of points whose float64 features take `gb` gigabytes (100 GB x 100 features = 125e6 points)."""
    return int(gb * 1e9) // (8 * features)


def uniforms(seed: int, stream: int, start: int, count: int, width: int) -> np.ndarray:
    """Rows start..start+count-1 of a (rows x width) table of uniform [0, 1) doubles (53 random bits each)."""
    if not 0 <= seed < 2**64:
        raise ValueError("seed must be in [0, 2**64)")
    per_row = -(-width // 4)  # Philox4x64 yields 4 values per counter step; each row owns whole steps
    out = np.empty((count, width))
    for first in range(0, count, CHUNK_ROWS):
        rows = min(CHUNK_ROWS, count - first)
        gen = np.random.Philox(key=seed + (stream << 64), counter=(start + first) * per_row)
        raw = gen.random_raw(rows * per_row * 4).reshape(rows, per_row * 4)[:, :width]
        np.multiply(raw >> np.uint64(11), 2.0**-53, out=out[first : first + rows])
    return out


def _normals(u: np.ndarray, n: int) -> np.ndarray:
    """Box-Muller: the first 2 * ceil(n / 2) columns of u (uniforms) -> n standard normal columns."""
    pairs = -(-n // 2)
    radius = np.sqrt(-2.0 * np.log(1.0 - u[:, :pairs]))
    angle = (2.0 * np.pi) * u[:, pairs : 2 * pairs]
    return np.concatenate([radius * np.cos(angle), radius * np.sin(angle)], axis=1)[:, :n]


def _quantize(x: np.ndarray) -> np.ndarray:
    return np.rint(x * (1.0 / QUANTUM)) * QUANTUM


def _params(seed: int, stream: int, shape: tuple[int, ...]) -> np.ndarray:
    """Small model parameters (true weights, teacher weights): standard normals, the same on every rank."""
    n = int(np.prod(shape))
    return _normals(uniforms(seed, stream, 0, 1, 2 * (-(-n // 2))), n).reshape(shape)


def blob_centers(seed: int, centers: int = 25, features: int = 100) -> np.ndarray:
    """The true cluster centers of blobs(): uniform in [-5, 5), quantized."""
    u = uniforms(seed, _CENTERS, 0, centers, features)
    return _quantize(10.0 * u - 5.0)


def _in_chunks(make, start: int, count: int) -> tuple[np.ndarray, ...]:
    """make(first row, rows) on pieces of CHUNK_ROWS rows, copied into whole arrays: bounds temporaries."""
    pieces = make(start, min(count, CHUNK_ROWS))
    outs = tuple(np.empty((count, *p.shape[1:]), p.dtype) for p in pieces)
    for first in range(0, count, CHUNK_ROWS):
        if first:
            pieces = make(start + first, min(CHUNK_ROWS, count - first))
        for out, piece in zip(outs, pieces):
            out[first : first + len(piece)] = piece
    return outs


def blobs(seed: int, start: int, count: int, features: int = 100, centers: int = 25) -> tuple[np.ndarray, np.ndarray]:
    """Points around `centers` Gaussian clusters (unit variance): (x[count, features], true label[count])."""
    width = 2 * (-(-features // 2)) + 1
    means = blob_centers(seed, centers, features)

    def make(first: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
        u = uniforms(seed, _BLOBS, first, rows, width)
        label = np.minimum((u[:, -1] * centers).astype(np.int64), centers - 1)
        return _quantize(means[label] + _normals(u, features)), label

    return _in_chunks(make, start, count)


def logistic_weights(seed: int, features: int = 100) -> np.ndarray:
    """The true weights of logistic(): a random direction scaled so the Bayes accuracy is about 0.87."""
    w = _params(seed, _TRUE_WEIGHTS, (features,))
    return 4.0 * w / np.linalg.norm(w)


def logistic(seed: int, start: int, count: int, features: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Standard-normal points (quantized) with labels y ~ Bernoulli(sigmoid(x . w_true)): (x, y as float 0/1)."""
    width = 2 * (-(-features // 2)) + 1
    w = logistic_weights(seed, features)

    def make(first: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
        u = uniforms(seed, _LOGISTIC, first, rows, width)
        x = _quantize(_normals(u, features))
        logit = (x * w).sum(axis=1)  # row by row (not a matmul): each label depends on its own row alone
        return x, (u[:, -1] < 1.0 / (1.0 + np.exp(-logit))).astype(np.float64)

    return _in_chunks(make, start, count)


def teacher(seed: int, start: int, count: int, features: int = 16, classes: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Standard-normal points labelled by argmax of a random tanh MLP (features -> 32 -> classes): (x, label)."""
    width = 2 * (-(-features // 2))
    w1 = _params(seed, _TEACHER_W1, (32, features)) / np.sqrt(features)
    w2 = _params(seed, _TEACHER_W2, (classes, 32))

    def make(first: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
        x = _quantize(_normals(uniforms(seed, _TEACHER, first, rows, width), features))
        # Row-by-row reductions (not a matmul, whose rounding depends on the matrix shape) so each label
        # depends on its own row alone, however the rows are split among ranks.
        hidden = np.tanh(np.stack([(x * w).sum(axis=1) for w in w1], axis=1))
        logits = np.stack([(hidden * w).sum(axis=1) for w in w2], axis=1)
        return x, np.argmax(logits, axis=1)

    return _in_chunks(make, start, count)


def keys(seed: int, start: int, count: int, dist: str = "uniform") -> np.ndarray:
    """int64 sort keys in [0, 2**62): "uniform", or "skewed" (density piling up near 0: u**4 scaled)."""
    u = uniforms(seed, _KEYS, start, count, 1)[:, 0]
    if dist == "uniform":
        return (u * 2.0**62).astype(np.int64)
    if dist == "skewed":
        return ((u * u) * (u * u) * 2.0**62).astype(np.int64)
    raise ValueError(f"unknown key distribution {dist!r} (uniform, skewed)")
