"""Uppercase reductions: every op x dtype x count x collective, IN_PLACE too, against numpy.

Reduce (two roots), Allreduce, Reduce_scatter_block, Reduce_scatter, Scan,
Exscan — plain and IN_PLACE — for SUM, PROD, MAX, MIN, LAND, LOR, LXOR,
BAND, BOR, BXOR, REPLACE, NO_OP (where MPI defines them for the dtype),
MAXLOC/MINLOC on pair types, and user ops (commutative; non-commutative
affine-map composition, which catches any deviation from rank order). Each
rank computes every rank's input itself and folds them with numpy in rank
order for the reference.

Run three times per job: with the default table; with every threshold at 0
and 24-byte segments, which sends the same small data through the ring,
scatter-allgather and ring-gather algorithms in many pipelined segments; and
with Rabenseifner's allreduce forced (the table keeps it for large vectors).
Also checks that random-float Allreduce results are bitwise identical on
every rank, and that bad (op, dtype) pairs raise MPI.Exception(ERR_OP).
"""

from __future__ import annotations

import numpy as np
from common import (
    FMPI,
    attempt,
    case,
    comm,
    data,
    digest,
    finish,
    rank,
    size,
    use_algorithms,
    use_large_path,
)
from mpi4py import MPI

COUNTS = [0, 1, 7, 60]
DTYPES = ["f8", "f4", "i4", "i8", "c16"]
UFUNC = {
    "SUM": np.add, "PROD": np.multiply, "MAX": np.maximum, "MIN": np.minimum,
    "LAND": np.logical_and, "LOR": np.logical_or, "LXOR": np.logical_xor,
    "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor,
}
VALID = {
    "f": ["SUM", "PROD", "MAX", "MIN", "REPLACE", "NO_OP"],
    "i": ["SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR", "REPLACE", "NO_OP"],
    "c": ["SUM", "PROD", "REPLACE", "NO_OP"],
}
AFFINE = np.dtype([("a", "<i8"), ("b", "<i8")])
# The C layouts of MPI's pair types (mpi4py has no .dtype on its Datatype objects).
PAIRS = {
    "DOUBLE_INT": np.dtype([("v", "f8"), ("i", "i4")], align=True),
    "FLOAT_INT": np.dtype([("v", "f4"), ("i", "i4")], align=True),
    "TWOINT": np.dtype([("v", "i4"), ("i", "i4")], align=True),
}


def user_sum(inbuf, inoutbuf, datatype):
    x = np.frombuffer(inbuf, dtype="f8")
    y = np.frombuffer(inoutbuf, dtype="f8")
    y += x


def user_affine(inbuf, inoutbuf, datatype):
    lo = np.frombuffer(inbuf, dtype=AFFINE)
    hi = np.frombuffer(inoutbuf, dtype=AFFINE)
    a = lo["a"] * hi["a"]
    b = hi["a"] * lo["b"] + hi["b"]
    hi["a"] = a
    hi["b"] = b


USER_SUM = MPI.Op.Create(user_sum, commute=True)
USER_AFFINE = MPI.Op.Create(user_affine, commute=False)


def fold(name, inputs):
    if not inputs:
        return None
    acc = inputs[0].copy()
    for x in inputs[1:]:
        if name in UFUNC:
            UFUNC[name](acc, x, out=acc)
        elif name == "REPLACE":
            acc[...] = x
        elif name == "NO_OP":
            pass
        elif name in ("USER_SUM",):
            acc += x
        elif name == "USER_AFFINE":
            a = acc["a"] * x["a"]
            b = x["a"] * acc["b"] + x["b"]
            acc["a"], acc["b"] = a, b
        elif name in ("MAXLOC", "MINLOC"):
            for k in range(len(acc)):
                (u, i), (v, j) = acc[k].tolist(), x[k].tolist()
                better = v > u if name == "MAXLOC" else v < u
                if better or (v == u and j < i):
                    acc[k] = x[k]
    return acc


def inputs_for(opname, dtype, count, salt):
    if opname == "USER_AFFINE":
        out = []
        for r in range(size):
            rng = np.random.default_rng(salt * 31 + r)
            x = np.empty(count, AFFINE)
            x["a"], x["b"] = rng.integers(-2, 3, count), rng.integers(-50, 50, count)
            out.append(x)
        return out
    if opname in ("MAXLOC", "MINLOC"):
        out = []
        for r in range(size):
            x = np.empty(count, dtype)
            x["v"] = data(r, count, dtype["v"], salt)
            x["i"] = r if (r + count) % 2 else size - r  # ties broken by the index
            out.append(x)
        return out
    return [data(r, count, dtype, salt) for r in range(size)]


def same(a, b):
    """Equal elements (field by field: pair types have padding bytes; -0.0 == 0.0, as a
    commutative op may legitimately combine in another order than the reference)."""
    if a.shape != b.shape:
        return False
    if a.dtype.names:
        return all(np.array_equal(a[f], b[f]) for f in a.dtype.names)
    return np.array_equal(a, b)


def spec_for(opname, dtype):
    """How a buffer of these elements is passed: with an explicit MPI type where numpy's is not one."""
    if opname == "USER_AFFINE":
        return lambda x: [x.view("i8"), MPI.INT64_T]  # pairs of int64; the user op reads them as such
    for name, pair in PAIRS.items():
        if np.dtype(dtype) == pair:
            return lambda x, t=getattr(MPI, name): [x, t]
    return lambda x: x


def run_op(label, op, opname, dtype, salt):
    S = spec_for(opname, dtype)
    for count in COUNTS:
        xs = inputs_for(opname, dtype, count, salt)
        mine = xs[rank]
        full = fold(opname, xs)
        tag = f"{label} {opname} {np.dtype(dtype)} n={count}"

        # Allreduce, plain and in place.
        def allreduce():
            out = np.zeros_like(mine)
            comm.Allreduce(S(mine), S(out), op)
            case(same(out, full), f"Allreduce {tag}")
            bits = b"".join(out[f].tobytes() for f in out.dtype.names) if out.dtype.names else out.tobytes()
            case(len(set(comm.allgather(bits))) == 1, f"Allreduce bitwise identical on all ranks {tag}")
            buf = mine.copy()
            comm.Allreduce(MPI.IN_PLACE, S(buf), op)
            case(same(buf, full), f"Allreduce IN_PLACE {tag}")

        attempt(allreduce, f"Allreduce {tag}")

        # Reduce at the first and the last rank.
        for root in sorted({0, size - 1}):
            def reduce():
                out = np.zeros_like(mine)
                comm.Reduce(S(mine), S(out) if rank == root else None, op, root)
                if rank == root:
                    case(same(out, full), f"Reduce root={root} {tag}")
                buf = mine.copy()
                comm.Reduce(MPI.IN_PLACE if rank == root else S(buf), S(buf), op, root)
                if rank == root:
                    case(same(buf, full), f"Reduce IN_PLACE root={root} {tag}")

            attempt(reduce, f"Reduce root={root} {tag}")

        # Scan / Exscan.
        def scans():
            out = np.zeros_like(mine)
            comm.Scan(S(mine), S(out), op)
            case(same(out, fold(opname, xs[: rank + 1])), f"Scan {tag}")
            buf = mine.copy()
            comm.Scan(MPI.IN_PLACE, S(buf), op)
            case(same(buf, fold(opname, xs[: rank + 1])), f"Scan IN_PLACE {tag}")
            out = np.zeros_like(mine)
            comm.Exscan(S(mine), S(out), op)
            if rank:
                case(same(out, fold(opname, xs[:rank])), f"Exscan {tag}")
            buf = mine.copy()
            comm.Exscan(MPI.IN_PLACE, S(buf), op)
            if rank:
                case(same(buf, fold(opname, xs[:rank])), f"Exscan IN_PLACE {tag}")

        attempt(scans, f"Scan {tag}")

    # Reduce_scatter_block: `count` elements per rank.
    for count in (0, 3):
        xs = inputs_for(opname, dtype, count * size, salt + 1)
        full = fold(opname, xs)
        tag = f"{label} {opname} {np.dtype(dtype)} block={count}"

        def rsb():
            out = np.zeros(count, xs[0].dtype)
            comm.Reduce_scatter_block(S(xs[rank]), S(out), op)
            case(same(out, full[rank * count : (rank + 1) * count]), f"Reduce_scatter_block {tag}")
            buf = xs[rank].copy()
            comm.Reduce_scatter_block(MPI.IN_PLACE, S(buf), op)
            case(same(buf[:count], full[rank * count : (rank + 1) * count]), f"Reduce_scatter_block IN_PLACE {tag}")

        attempt(rsb, f"Reduce_scatter_block {tag}")

    # Reduce_scatter with uneven counts, given and gathered.
    counts = [(r * 3 + 1) % 4 for r in range(size)]
    starts = np.cumsum([0] + counts)
    xs = inputs_for(opname, dtype, sum(counts), salt + 2)
    full = fold(opname, xs)
    mine_block = full[starts[rank] : starts[rank + 1]]
    tag = f"{label} {opname} {np.dtype(dtype)} counts={counts}"
    counts2 = [2 * c for c in counts] if opname == "USER_AFFINE" else counts  # in MPI elements

    def rs():
        out = np.zeros(counts[rank], xs[0].dtype)
        comm.Reduce_scatter(S(xs[rank]), S(out), counts2, op)
        case(same(out, mine_block), f"Reduce_scatter {tag}")
        out = np.zeros(counts[rank], xs[0].dtype)
        comm.Reduce_scatter(S(xs[rank]), S(out), None, op)
        case(same(out, mine_block), f"Reduce_scatter (counts gathered) {tag}")
        buf = xs[rank].copy()
        comm.Reduce_scatter(MPI.IN_PLACE, S(buf), counts2, op)
        case(same(buf[: counts[rank]], mine_block), f"Reduce_scatter IN_PLACE {tag}")

    attempt(rs, f"Reduce_scatter {tag}")


def run_all(label):
    salt = 0
    for dt in DTYPES:
        for name in VALID[np.dtype(dt).kind]:
            if name in ("REPLACE", "NO_OP") and not FMPI:
                continue  # MPICH allows them in accumulates only; fmpi reduces with them in rank order
            salt += 1
            run_op(label, getattr(MPI, name), name, dt, salt)
    for pair in PAIRS.values():
        for name in ("MAXLOC", "MINLOC"):
            salt += 1
            run_op(label, getattr(MPI, name), name, pair, salt)
    run_op(label, USER_SUM, "USER_SUM", "f8", 900)
    run_op(label, USER_AFFINE, "USER_AFFINE", AFFINE, 901)

    # Random floats: the reduction order shows in the last bits; every rank must hold the same ones.
    for count in (1, 100, 5000):
        x = data(rank, count, "f8", 77, small=False)
        out = np.empty_like(x)
        comm.Allreduce(x, out, MPI.SUM)
        ref = np.sum([data(r, count, "f8", 77, small=False) for r in range(size)], axis=0)
        case(np.allclose(out, ref), f"{label} Allreduce float close n={count}")
        digests = comm.allgather(digest(out))
        case(len(set(digests)) == 1, f"{label} Allreduce float bitwise identical n={count}: {digests}")


def bad_pairs():
    for op, dt, t in ((MPI.BAND, "f8", MPI.DOUBLE), (MPI.LAND, "f8", MPI.DOUBLE), (MPI.MAX, "c16", MPI.C_DOUBLE_COMPLEX),
                      (MPI.MAXLOC, "f8", MPI.DOUBLE),
                      (MPI.SUM, PAIRS["DOUBLE_INT"], MPI.DOUBLE_INT)):
        try:
            comm.Allreduce([np.zeros(2, dt), t], [np.zeros(2, dt), t], op)
        except MPI.Exception as exc:
            case(exc.Get_error_class() == MPI.ERR_OP, f"{op} on {dt}: error class {exc.Get_error_class()}")
        else:
            case(False, f"{op} on {dt} did not raise")


bad_pairs()
run_all("default")
use_large_path()
run_all("large-path")
use_algorithms("allreduce:rabenseifner")  # (the table picks it only for large vectors)
run_all("rabenseifner")
finish()
