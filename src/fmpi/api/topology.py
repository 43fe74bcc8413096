"""Cartesian process topologies: ``MPI.Compute_dims`` and ``Cartcomm``.

``compute_dims`` picks the most balanced grid, as MPICH's MPI_Dims_create
does, so programs that size their domain from it decompose the same way under
fmpi and under real MPI.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from . import exceptions as err


def compute_dims(nnodes: int, dims: int | Sequence[int]) -> list[int]:
    """Factor `nnodes` into len(dims) factors, non-increasing, as balanced as possible.

    Entries of `dims` that are non-zero are fixed; zeros are chosen.
    """
    fixed = [0] * dims if isinstance(dims, int) else [int(d) for d in dims]
    if nnodes < 1 or any(d < 0 for d in fixed):
        raise err.Exception(err.ERR_ARG, f"cannot split {nnodes} processes into dims {fixed}")
    product = 1
    for d in fixed:
        product *= d or 1
    free = fixed.count(0)
    if nnodes % product or (free == 0 and product != nnodes):
        raise err.Exception(err.ERR_ARG, f"{nnodes} processes do not fit dims {fixed}")
    chosen = iter(_balanced(nnodes // product, free))
    return [d or next(chosen) for d in fixed]


@lru_cache(maxsize=256)
def _balanced(n: int, k: int) -> tuple[int, ...]:
    """The non-increasing k-tuple with product n whose largest/smallest spread is least."""
    if k == 0:
        return ()
    best: tuple[int, ...] | None = None
    for candidate in _factorizations(n, k, n):
        if best is None or (candidate[0] - candidate[-1], candidate) < (best[0] - best[-1], best):
            best = candidate
    return best


def _factorizations(n: int, k: int, limit: int):
    """Non-increasing k-tuples of factors <= limit whose product is n."""
    if k == 1:
        if n <= limit:
            yield (n,)
        return
    for first in range(min(n, limit), 0, -1):
        if n % first == 0 and first ** k >= n:  # the first factor is the largest
            for rest in _factorizations(n // first, k - 1, first):
                yield (first, *rest)
