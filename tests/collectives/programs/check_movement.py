"""Uppercase data movement: Bcast, Gather(v), Scatter(v), Allgather(v), Alltoall(v), Barrier.

Every dtype x count x root, plain and IN_PLACE, with the message-spec forms
of mpi4py ([buf, count, type], [buf, (counts, displs), type], typecodes...),
uneven and scattered v-layouts, zero-length blocks. As check_reductions.py,
run with the default table and with every threshold at 0 and tiny segments.
"""

from __future__ import annotations

import numpy as np
from common import attempt, case, comm, data, finish, rank, size, use_large_path
from mpi4py import MPI

DTYPES = ["f8", "f4", "i4", "i8", "c16"]
COUNTS = [0, 1, 7, 60]
MPI_TYPE = {"f8": MPI.DOUBLE, "f4": MPI.FLOAT, "i4": MPI.INT, "i8": MPI.LONG, "c16": MPI.C_DOUBLE_COMPLEX}


def block(r, count, dt, salt=0):
    return data(r, count, dt, salt) + (r if np.dtype(dt).kind != "c" else 0)


def run_all(label):
    salt = 0
    roots = sorted({0, size - 1, size // 2})
    for dt in DTYPES:
        for count in COUNTS:
            salt += 1
            tag = f"{label} {dt} n={count}"
            blocks = [block(r, count, dt, salt) for r in range(size)]
            everything = np.concatenate(blocks) if count else np.zeros(0, dt)

            def bcast():
                for root in roots:
                    buf = blocks[root].copy() if rank == root else np.zeros(count, dt)
                    comm.Bcast([buf, count, MPI_TYPE[dt]], root=root)
                    case(np.array_equal(buf, blocks[root]), f"Bcast root={root} {tag}")

            def gather():
                for root in roots:
                    out = np.zeros(size * count, dt) if rank == root else None
                    comm.Gather(blocks[rank], out, root)
                    if rank == root:
                        case(np.array_equal(out, everything), f"Gather root={root} {tag}")
                    out = np.zeros(size * count, dt)
                    if rank == root:
                        out[rank * count : (rank + 1) * count] = blocks[rank]
                        comm.Gather(MPI.IN_PLACE, [out, count, MPI_TYPE[dt]], root)
                        case(np.array_equal(out, everything), f"Gather IN_PLACE root={root} {tag}")
                    else:
                        comm.Gather(blocks[rank], None, root)

            def scatter():
                for root in roots:
                    out = np.zeros(count, dt)
                    comm.Scatter([everything, MPI_TYPE[dt]] if rank == root else None, out, root)
                    case(np.array_equal(out, blocks[rank]), f"Scatter root={root} {tag}")
                    if rank == root:
                        src = everything.copy()
                        comm.Scatter(src, MPI.IN_PLACE, root)
                        case(np.array_equal(src, everything), f"Scatter IN_PLACE root={root} {tag}")
                    else:
                        out = np.zeros(count, dt)
                        comm.Scatter(None, out, root)
                        case(np.array_equal(out, blocks[rank]), f"Scatter (root in place) {tag}")

            def allgather():
                out = np.zeros(size * count, dt)
                comm.Allgather(blocks[rank], out)
                case(np.array_equal(out, everything), f"Allgather {tag}")
                out = np.zeros(size * count, dt)
                out[rank * count : (rank + 1) * count] = blocks[rank]
                comm.Allgather(MPI.IN_PLACE, [out, MPI_TYPE[dt]])
                case(np.array_equal(out, everything), f"Allgather IN_PLACE {tag}")

            def alltoall():
                send = np.concatenate([block(rank * size + d, count, dt, salt) for d in range(size)]) if count else np.zeros(0, dt)
                expect = np.concatenate([block(s * size + rank, count, dt, salt) for s in range(size)]) if count else np.zeros(0, dt)
                out = np.zeros(size * count, dt)
                comm.Alltoall(send, out)
                case(np.array_equal(out, expect), f"Alltoall {tag}")
                buf = send.copy()
                comm.Alltoall(MPI.IN_PLACE, buf)
                case(np.array_equal(buf, expect), f"Alltoall IN_PLACE {tag}")

            for fn in (bcast, gather, scatter, allgather, alltoall):
                attempt(fn, f"{fn.__name__} {tag}")

        # v-variants: rank r owns (r * 3 + count) % 5 elements; displacements reversed with gaps.
        for count in (0, 2):
            salt += 1
            counts = [(r * 3 + count) % 5 for r in range(size)]
            tag = f"{label} {dt} counts={counts}"
            blocks = [block(r, counts[r], dt, salt) for r in range(size)]
            displs, pos = [0] * size, 1
            for r in reversed(range(size)):
                displs[r] = pos
                pos += counts[r] + 2
            total = pos

            def placed():
                out = np.zeros(total, dt)
                for r in range(size):
                    out[displs[r] : displs[r] + counts[r]] = blocks[r]
                return out

            def gatherv():
                for root in roots:
                    out = np.zeros(total, dt)
                    comm.Gatherv(blocks[rank], [out, counts, displs, MPI_TYPE[dt]] if rank == root else None, root)
                    if rank == root:
                        case(np.array_equal(out, placed()), f"Gatherv root={root} {tag}")
                    packed = np.zeros(sum(counts), dt)
                    comm.Gatherv(blocks[rank], [packed, counts] if rank == root else None, root)
                    if rank == root:
                        case(np.array_equal(packed, np.concatenate(blocks)), f"Gatherv packed root={root} {tag}")
                    if rank == root:
                        out = np.zeros(total, dt)
                        out[displs[rank] : displs[rank] + counts[rank]] = blocks[rank]
                        comm.Gatherv(MPI.IN_PLACE, [out, (counts, displs), MPI_TYPE[dt]], root)
                        case(np.array_equal(out, placed()), f"Gatherv IN_PLACE root={root} {tag}")
                    else:
                        comm.Gatherv(blocks[rank], None, root)

            def scatterv():
                for root in roots:
                    out = np.zeros(counts[rank], dt)
                    comm.Scatterv([placed(), counts, displs, MPI_TYPE[dt]] if rank == root else None, out, root)
                    case(np.array_equal(out, blocks[rank]), f"Scatterv root={root} {tag}")

            def allgatherv():
                out = np.zeros(total, dt)
                comm.Allgatherv(blocks[rank], [out, counts, displs, MPI_TYPE[dt]])
                case(np.array_equal(out, placed()), f"Allgatherv {tag}")
                out = np.zeros(total, dt)
                out[displs[rank] : displs[rank] + counts[rank]] = blocks[rank]
                comm.Allgatherv(MPI.IN_PLACE, [out, (counts, displs), MPI_TYPE[dt]])
                case(np.array_equal(out, placed()), f"Allgatherv IN_PLACE {tag}")
                packed = np.zeros(sum(counts), dt)
                comm.Allgatherv([blocks[rank], MPI_TYPE[dt]], [packed, counts])
                case(np.array_equal(packed, np.concatenate(blocks)), f"Allgatherv packed {tag}")

            def alltoallv():
                # rank s sends (s + d) % 3 + count elements to rank d
                sc = [(rank + d) % 3 + count for d in range(size)]
                rc = [(s + rank) % 3 + count for s in range(size)]
                send = np.concatenate([block(rank * size + d, sc[d], dt, salt) for d in range(size)])
                expect = np.concatenate([block(s * size + rank, rc[s], dt, salt) for s in range(size)])
                out = np.zeros(sum(rc), dt)
                comm.Alltoallv([send, sc], [out, rc])
                case(np.array_equal(out, expect), f"Alltoallv {tag}")
                # Scattered receive layout: reversed order, gaps.
                rd, pos = [0] * size, 2
                for s in reversed(range(size)):
                    rd[s] = pos
                    pos += rc[s] + 1
                out = np.zeros(pos, dt)
                comm.Alltoallv([send, (sc, None), MPI_TYPE[dt]], [out, rc, rd, MPI_TYPE[dt]])
                got = np.concatenate([out[rd[s] : rd[s] + rc[s]] for s in range(size)])
                case(np.array_equal(got, expect), f"Alltoallv scattered {tag}")
                # IN_PLACE needs symmetric counts: rank s sends count+1 elements to everyone
                sym = [count + 1] * size
                buf = np.concatenate([block(rank * size + d, count + 1, dt, salt) for d in range(size)])
                comm.Alltoallv(MPI.IN_PLACE, [buf, sym])
                exp = np.concatenate([block(s * size + rank, count + 1, dt, salt) for s in range(size)])
                case(np.array_equal(buf, exp), f"Alltoallv IN_PLACE {tag}")

            for fn in (gatherv, scatterv, allgatherv, alltoallv):
                attempt(fn, f"{fn.__name__} {tag}")

    # Bytes-like buffers and typecodes, not only numpy.
    def bytes_like():
        raw = bytearray(b"%d" % rank * 3)
        out = bytearray(3 * size)
        comm.Allgather([raw, "B"], [out, "B"])
        case(bytes(out) == b"".join(b"%d" % r * 3 for r in range(size)) or size > 10, f"{label} Allgather bytearray")
        msg = bytearray(b"hello!" if rank == 0 else b"......")
        comm.Bcast(msg, 0)
        case(bytes(msg) == b"hello!", f"{label} Bcast bytearray")

    attempt(bytes_like, f"{label} bytes-like")

    for _ in range(3):
        comm.Barrier()
    case(True, "Barrier")


run_all("default")
use_large_path()
run_all("large-path")
finish()
