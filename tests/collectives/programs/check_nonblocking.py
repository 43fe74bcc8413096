"""Non-blocking collectives: results, ordering, completion calls, and real background progress.

- every I-collective gives the blocking call's result, through Wait, Test,
  Waitall, Waitany, Testall;
- several outstanding at once complete correctly, mixed with blocking
  collectives started in between;
- progress without MPI calls: rank 0 starts an Iallreduce and then sleeps,
  not calling MPI at all, while the others join late; when it wakes the
  request must already be complete (Test is True at once): the work ran in
  the background, not inside Wait;
- Ibarrier really does not return before everyone has entered.
"""

from __future__ import annotations

import time

import numpy as np
from common import FMPI, attempt, case, comm, data, finish, rank, size
from mpi4py import MPI


def results():
    x = data(rank, 50, "f8")
    xs = [data(r, 50, "f8") for r in range(size)]
    total = np.sum(xs, axis=0)
    out = np.zeros(50)
    req = comm.Iallreduce(x, out, MPI.SUM)
    case(isinstance(req, MPI.Request), "Iallreduce returns a Request")
    req.Wait()
    case(np.array_equal(out, total), "Iallreduce + Wait")

    buf = np.arange(10.0) if rank == size - 1 else np.zeros(10)
    req = comm.Ibcast(buf, root=size - 1)
    while not req.Test():
        pass
    case(np.array_equal(buf, np.arange(10.0)), "Ibcast + Test loop")

    red = np.zeros(50)
    gat = np.zeros(size * 50)
    a2a = np.zeros(size * 2, "i8")
    scn, exs = np.zeros(50), np.zeros(50)
    rsb = np.zeros(2)
    gv = np.zeros(size * 50)
    sc = np.zeros(50)
    reqs = [
        comm.Ireduce(x, red if rank == 0 else None, MPI.SUM, 0),
        comm.Iallgather(x, gat),
        comm.Ialltoall(np.arange(size * 2, dtype="i8") + 100 * rank, a2a),
        comm.Ibarrier(),
        comm.Iscan(x, scn, MPI.SUM),
        comm.Iexscan(x, exs, MPI.SUM),
        comm.Ireduce_scatter_block(np.arange(2 * size, dtype="f8") * (rank + 1), rsb, MPI.SUM),
        comm.Igather(x, gv if rank == 0 else None, 0),
        comm.Iscatter(np.concatenate(xs) if rank == 0 else None, sc, 0),
    ]
    # A blocking collective in between must not get mixed up with the pending ones.
    mid = comm.allreduce(rank)
    case(mid == size * (size - 1) // 2, "blocking allreduce while non-blocking ones are pending")
    MPI.Request.Waitall(reqs)
    if rank == 0:
        case(np.array_equal(red, total), "Ireduce")
        case(np.array_equal(gv, np.concatenate(xs)), "Igather")
    case(np.array_equal(gat, np.concatenate(xs)), "Iallgather")
    case(list(a2a) == [100 * s + 2 * rank + k for s in range(size) for k in range(2)], f"Ialltoall {list(a2a)}")
    case(np.array_equal(scn, np.sum(xs[: rank + 1], axis=0)), "Iscan")
    if rank:
        case(np.array_equal(exs, np.sum(xs[:rank], axis=0)), "Iexscan")
    full = np.arange(2 * size, dtype="f8") * (size * (size + 1) // 2)
    case(np.array_equal(rsb, full[2 * rank : 2 * rank + 2]), "Ireduce_scatter_block")
    case(np.array_equal(sc, xs[rank]), "Iscatter")

    # Waitany / Testall / IN_PLACE forms.
    bufs = [np.full(5, float(rank + k)) for k in range(3)]
    reqs = [comm.Iallreduce(MPI.IN_PLACE, b, MPI.MAX) for b in bufs]
    done = set()
    while len(done) < 3:
        i = MPI.Request.Waitany(reqs)
        done.add(i)
    case(all(np.all(b == size - 1 + k) for k, b in enumerate(bufs)), "Iallreduce IN_PLACE + Waitany")
    g = np.zeros(size)
    g[rank] = rank
    req = comm.Iallgather(MPI.IN_PLACE, g)
    while not MPI.Request.Testall([req]):
        pass
    case(list(g) == list(range(size)), "Iallgather IN_PLACE + Testall")
    counts = [r % 2 + 1 for r in range(size)]
    gv = np.zeros(sum(counts))
    MPI.Request.Waitall([comm.Iallgatherv(np.full(counts[rank], float(rank)), [gv, counts])])
    case(list(gv) == [float(r) for r in range(size) for _ in range(counts[r])], "Iallgatherv")


def v_variants():
    counts = [r % 3 + 1 for r in range(size)]
    mine = np.full(counts[rank], float(rank))
    everyone = np.concatenate([np.full(counts[r], float(r)) for r in range(size)])
    gv = np.zeros(sum(counts))
    sv = np.zeros(counts[rank])
    sc = [(rank + d) % 2 + 1 for d in range(size)]
    rc = [(s + rank) % 2 + 1 for s in range(size)]
    a2av = np.zeros(sum(rc), "i8")
    rs = np.zeros(counts[rank])
    reqs = [
        comm.Igatherv(mine, [gv, counts] if rank == size - 1 else None, size - 1),
        comm.Iscatterv([everyone, counts] if rank == 0 else None, sv, 0),
        comm.Ialltoallv([np.concatenate([np.full(sc[d], 10 * rank + d) for d in range(size)]), sc], [a2av, rc]),
        comm.Ireduce_scatter(np.arange(sum(counts), dtype="f8") * (rank + 1), rs, None, MPI.SUM),
    ]
    MPI.Request.Waitall(reqs)
    if rank == size - 1:
        case(np.array_equal(gv, everyone), "Igatherv")
    case(np.array_equal(sv, mine), "Iscatterv")
    case(list(a2av) == [10 * s + rank for s in range(size) for _ in range(rc[s])], "Ialltoallv")
    start = sum(counts[:rank])
    full = np.arange(sum(counts), dtype="f8") * (size * (size + 1) // 2)
    case(np.array_equal(rs, full[start : start + counts[rank]]), "Ireduce_scatter (counts gathered in the background)")


def many_in_flight():
    outs = [np.zeros(1000) for _ in range(20)]
    reqs = [comm.Iallreduce(np.full(1000, float(k * rank)), outs[k], MPI.SUM) for k in range(20)]
    MPI.Request.Waitall(reqs)
    case(all(np.all(outs[k] == k * size * (size - 1) / 2) for k in range(20)), "20 Iallreduce in flight")


def background_progress():
    if size == 1 or not FMPI:
        return  # MPICH has no asynchronous progress by default: this is fmpi's own promise
    x = np.ones(1 << 16)
    out = np.zeros_like(x)
    comm.Barrier()
    if rank == 0:
        req = comm.Iallreduce(x, out, MPI.SUM)
        time.sleep(1.0)  # no MPI call at all meanwhile
        case(req.Test(), "Iallreduce completed in the background while rank 0 made no MPI call")
        req.Wait()
    else:
        time.sleep(0.2)  # join late: the work must happen after rank 0 went to sleep
        comm.Iallreduce(x, out, MPI.SUM).Wait()
    case(np.all(out == size), "background Iallreduce result")


def ibarrier_waits():
    if size == 1:
        return
    comm.Barrier()
    if rank == size - 1:
        time.sleep(0.3)  # enter late
        comm.Ibarrier().Wait()
        return
    started = time.monotonic()
    req = comm.Ibarrier()
    early = req.Test()
    req.Wait()
    case(not early, "Ibarrier completed before the last rank entered")
    case(time.monotonic() - started > 0.15, "Ibarrier.Wait returned too early")


for fn in (results, v_variants, many_in_flight, background_progress, ibarrier_waits):
    attempt(fn, fn.__name__)
finish()
