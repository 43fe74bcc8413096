"""Lowercase (pickled) collectives: every collective x op x kind of object, at every root.

References are computed on every rank from every rank's (deterministic)
object with functools.reduce in rank order. Objects include None, ints,
strings, nested containers, numpy arrays small and large (>= 64 KiB travel
out of band) and dicts of them. Checks mpi4py's result semantics too: fresh
copies even at the root, None off the root, exscan's None at rank 0.
"""

from __future__ import annotations

import functools

import numpy as np
from common import attempt, case, comm, finish, rank, size
from mpi4py import MPI


def obj(kind: str, r: int):
    if kind == "none":
        return None
    if kind == "int":
        return r * 7 - 3
    if kind == "str":
        return f"<{r}>" * (r + 1)
    if kind == "nested":
        return {"rank": r, "list": list(range(r)), "t": (r, "x"), "set": {r, -r}}
    if kind == "small-array":
        return np.arange(5, dtype="i8") * (r + 1)
    if kind == "large-array":
        return np.full(20_000, r, dtype="f8")  # 160 KB: out-of-band pickle buffers
    if kind == "dict-arrays":
        return {"w": np.full(10_000, r + 0.5), "b": np.arange(3) + r}
    raise KeyError(kind)


KINDS = ["none", "int", "str", "nested", "small-array", "large-array", "dict-arrays"]


def equal(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def movement():
    roots = sorted({0, size - 1, size // 2})
    for kind in KINDS:
        everyone = [obj(kind, r) for r in range(size)]
        mine = everyone[rank]
        for root in roots:
            got = comm.bcast(mine if rank == root else None, root=root)
            case(equal(got, everyone[root]), f"bcast {kind} root={root}")
            if rank == root and mine is not None and not isinstance(mine, int):
                case(got is not mine, f"bcast {kind} returns a copy at the root (as mpi4py)")
            got = comm.gather(mine, root=root)
            case(equal(got, everyone) if rank == root else got is None, f"gather {kind} root={root}")
            got = comm.scatter([obj(kind, r * 10) for r in range(size)] if rank == root else None, root=root)
            case(equal(got, obj(kind, rank * 10)), f"scatter {kind} root={root}")
        got = comm.allgather(mine)
        case(equal(got, everyone), f"allgather {kind}")
        got = comm.alltoall([(rank, d, obj(kind, d)) for d in range(size)])
        case(equal(got, [(s, rank, obj(kind, rank)) for s in range(size)]), f"alltoall {kind}")
    comm.barrier()
    case(comm.barrier() is None, "barrier")


def concat(a, b, dt=None):
    return a + b


NONCOMMUTE = MPI.Op.Create(concat, commute=False)


def reductions():
    numeric = {
        "SUM": [r * 3 - 2 for r in range(size)],
        "PROD": [(r % 3) - 1 or 2 for r in range(size)],
        "MAX": [(r * 5) % 7 for r in range(size)],
        "MIN": [(r * 5) % 7 for r in range(size)],
        "LAND": [r % 4 != 3 for r in range(size)],
        "LOR": [r == size - 1 for r in range(size)],
        "LXOR": [r % 2 == 0 for r in range(size)],
        "BAND": [0xFF ^ (1 << r) for r in range(size)],
        "BOR": [1 << r for r in range(size)],
        "BXOR": [r * 9 for r in range(size)],
        "MAXLOC": [((r * 5) % 3, r) for r in range(size)],
        "MINLOC": [((r * 5) % 3, size - r) for r in range(size)],
        "REPLACE": list(range(size)),
        "NO_OP": list(range(size)),
    }
    cases = [(name, getattr(MPI, name), values) for name, values in numeric.items()]
    cases.append(("user-concat", NONCOMMUTE, [f"[{r}]" for r in range(size)]))
    cases.append(("lambda-list", lambda a, b: a + b, [[r] for r in range(size)]))
    cases.append(("SUM-arrays", MPI.SUM, [np.arange(4) * r for r in range(size)]))
    cases.append(("SUM-large-arrays", MPI.SUM, [np.full(20_000, float(r)) for r in range(size)]))
    for label, op, values in cases:
        fn = op if not isinstance(op, MPI.Op) else (lambda a, b, op=op: op(a, b))
        whole = functools.reduce(fn, values)
        for root in sorted({0, size - 1}):
            got = comm.reduce(values[rank], op=op, root=root)
            case(equal(got, whole) if rank == root else got is None, f"reduce {label} root={root}: {got!r}"[:200])
        got = comm.allreduce(values[rank], op=op)
        case(equal(got, whole), f"allreduce {label}: {got!r}"[:200])
        got = comm.scan(values[rank], op=op)
        case(equal(got, functools.reduce(fn, values[: rank + 1])), f"scan {label}: {got!r}"[:200])
        got = comm.exscan(values[rank], op=op)
        expect = None if rank == 0 else functools.reduce(fn, values[:rank])
        case(equal(got, expect), f"exscan {label}: {got!r}"[:200])
    # The default op is SUM; a one-rank reduction returns a copy.
    lst = [rank]
    got = comm.allreduce(lst)
    case(got == list(range(size)), "allreduce default op SUM on lists")
    if size == 1:
        case(got is not lst, "allreduce on one rank returns a copy")
    # Floats: every rank must hold the very same bits.
    x = float(np.random.default_rng(rank).standard_normal())
    got = comm.allreduce(x)
    case(len(set(comm.allgather(got.hex()))) == 1, "allreduce float bitwise identical")


def errors():
    try:
        comm.bcast(1, root=size)
    except MPI.Exception as exc:
        case(exc.Get_error_class() == MPI.ERR_ROOT, "bcast bad root -> ERR_ROOT")
    else:
        case(False, "bcast bad root did not raise")
    try:
        comm.alltoall([1] * (size + 1))
    except ValueError:
        case(True, "alltoall wrong length -> ValueError")
    else:
        case(False, "alltoall wrong length did not raise")


for fn in (movement, reductions, errors):
    attempt(fn, fn.__name__)
finish()
