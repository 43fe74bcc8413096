"""Arguments as mpi4py's Cython layer takes them: a rank, tag or root given for a C ``int``."""

from __future__ import annotations

import operator
from typing import Any


def c_int(value: Any) -> int:
    """`value` as mpi4py passes it to a C int: any integer (numpy's too), and a float truncated, as mpi4py
    does (``myid + nprocs/2`` in mpi4py's own osu_multi_lat demo is a float); anything else is a TypeError."""
    try:
        return operator.index(value)
    except TypeError:
        if isinstance(value, float):
            return int(value)
        raise TypeError(f"an integer is required, not {type(value).__name__}") from None
