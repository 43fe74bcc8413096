#!/usr/bin/env python3
"""How fast fmpi packs non-contiguous datatypes, against numpy copying the same elements.

    python benchmarks/datatypes/pack_speed.py [--repeat 21]

For each layout (a column block of a matrix, a 3-D subarray, a vector of single
doubles, an indexed type, a struct of mixed fields) it times ``Datatype.Pack`` into a
preallocated buffer and numpy gathering the same elements into the same buffer
(``np.copyto(out, a[view])``), and prints the medians (interleaved rounds).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from fmpi import MPI


def cases():
    a = np.random.default_rng(0).random((1024, 1024))
    yield "columns 1024x512 of 1024x1024 f8", a, MPI.DOUBLE.Create_subarray([1024, 1024], [1024, 512], [0, 256]), \
        lambda: a[:, 256:768]
    c = np.random.default_rng(1).random((128, 128, 128))
    yield "subarray 64^3 of 128^3 f8", c, MPI.DOUBLE.Create_subarray([128] * 3, [64] * 3, [32] * 3), \
        lambda: c[32:96, 32:96, 32:96]
    v = np.random.default_rng(2).random(1 << 20)
    yield "vector: every 2nd of 1M f8", v, MPI.DOUBLE.Create_vector(1 << 19, 1, 2), lambda: v[::2]
    idx = np.sort(np.random.default_rng(3).choice(1 << 17, 256, replace=False)) * 8
    yield "indexed: 256 blocks of 8 f8", v, MPI.DOUBLE.Create_indexed([8] * 256, idx.tolist()), \
        lambda: v[(idx[:, None] + np.arange(8)).ravel()]
    rec = np.zeros(1 << 18, np.dtype([("i", "i4"), ("x", "f8"), ("pad", "u1", 4)], align=True))
    st = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.INT, MPI.DOUBLE]).Create_resized(0, rec.dtype.itemsize)
    yield "struct {i4, f8} of 256k records", rec, st.Create_contiguous(1 << 18), lambda: rec[["i", "x"]]


def packed_dtype(view: np.ndarray) -> np.dtype:
    """The view's dtype without padding: what its elements are once packed."""
    if view.dtype.names is None:
        return view.dtype
    return np.dtype([(n, view.dtype.fields[n][0]) for n in view.dtype.names])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    for name, array, datatype, numpy_view in cases():
        datatype.Commit()
        out = bytearray(datatype.Pack_size(1))
        whole = memoryview(array).cast("B")  # (one element of each type spans the array)
        fmpi_times, numpy_times = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            datatype.Pack(whole, out, 0)
            t1 = time.perf_counter()
            view = numpy_view()
            np.copyto(np.frombuffer(out, packed_dtype(view)).reshape(view.shape), view)
            t2 = time.perf_counter()
            fmpi_times.append(t1 - t0)
            numpy_times.append(t2 - t1)
        mb = datatype.size / 1e6
        f, n = statistics.median(fmpi_times), statistics.median(numpy_times)
        print(f"{name:36s} {mb:7.2f} MB  Pack {f * 1e3:8.3f} ms ({mb / f / 1e3:5.2f} GB/s)   numpy {n * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
