"""Programs around flow control (eager limit, rendezvous, credits), run under fmpirun and mpiexec alike.

Each rank writes what it received to OUTDIR/rank<R>.txt; the test compares
the sorted lines of the two runs. The sizes straddle the eager limit the
test sets (FMPI_EAGER_LIMIT=64K, FMPI_UNEXPECTED_MAX small), so every case
mixes eager and rendezvous messages; none of them deadlocks under MPICH.
"""

import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
OUT = open(f"{sys.argv[1]}/rank{rank}.txt", "w")
SMALL, LARGE = 100, 3 * 64 * 1024 + 8  # below and above the test's eager limit (bytes)


def note(*words) -> None:
    print(*words, file=OUT)


def data(seed: int, nbytes: int) -> np.ndarray:
    return (np.arange(nbytes // 8, dtype=np.float64) + seed) % 1009


def digest(arr: np.ndarray) -> str:
    return f"{arr.size}:{float(arr.sum()):.0f}:{float(arr[-1]) if arr.size else 0:.0f}"


def many_isends_before_irecvs() -> None:
    """Rank 0 Isends 40 messages of mixed sizes; rank 1 posts its Irecvs only after a pause."""
    sizes = [SMALL if i % 3 else LARGE for i in range(40)]
    if rank == 0:
        bufs = [data(i, n) for i, n in enumerate(sizes)]
        MPI.Request.Waitall([comm.Isend(b, dest=1, tag=i % 4) for i, b in enumerate(bufs)])
        note("many_isends_sent")
    elif rank == 1:
        time.sleep(0.3)
        outs = [np.empty(n // 8) for n in sizes]
        MPI.Request.Waitall([comm.Irecv(o, source=0, tag=i % 4) for i, o in enumerate(outs)])
        for i, o in enumerate(outs):
            note("many_isends", i, digest(o))


def irecv_posted_late() -> None:
    if rank == 0:
        comm.Isend(data(7, 4 * LARGE), dest=1, tag=3).Wait()
    elif rank == 1:
        time.sleep(0.2)
        out = np.empty(4 * LARGE // 8)
        status = MPI.Status()
        comm.Irecv(out, source=0, tag=MPI.ANY_TAG).Wait(status)
        note("irecv_late", status.Get_tag(), status.Get_count(MPI.DOUBLE), digest(out))


def head_to_head_sendrecv() -> None:
    if size < 2 or rank >= size - size % 2:
        return
    peer = rank ^ 1
    out = np.empty(16 * LARGE // 8)
    comm.Sendrecv(data(rank, 16 * LARGE), dest=peer, sendtag=5, recvbuf=out, source=peer, recvtag=5)
    note("sendrecv", peer, digest(out))
    got = comm.sendrecv({"from": rank, "a": data(rank + 1, 8 * LARGE)}, dest=peer, source=peer)
    note("sendrecv_obj", got["from"], digest(got["a"]))


def any_source_mix() -> None:
    """Every rank sends rank 0 a mix of small and large messages; per sender, order must hold."""
    per = 12
    if rank == 0:
        seen: dict[int, list[int]] = {}
        for _ in range(per * (size - 1)):
            status = MPI.Status()
            msg = comm.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
            seen.setdefault(status.Get_source(), []).append(msg["k"])
            note("any_source", status.Get_source(), status.Get_tag(), msg["k"], digest(msg["a"]))
        for src, ks in sorted(seen.items()):
            note("any_source_order", src, ks == sorted(ks))
    else:
        for k in range(per):
            nbytes = LARGE if k % 2 else SMALL
            comm.send({"k": k, "a": data(rank * 100 + k, nbytes)}, dest=0, tag=k % 3)


def probe_then_recv() -> None:
    if rank == 0:
        comm.Send(data(3, 5 * LARGE), dest=1, tag=11)
        comm.send({"big": data(4, 3 * LARGE)}, dest=1, tag=12)
        comm.Send(data(5, 2 * LARGE), dest=1, tag=13)
    elif rank == 1:
        status = MPI.Status()
        comm.Probe(source=0, tag=11, status=status)
        out = np.empty(status.Get_count(MPI.DOUBLE))
        comm.Recv(out, source=0, tag=11)
        note("probe", status.Get_count(MPI.BYTE), digest(out))
        while not comm.iprobe(source=0, tag=12, status=status):
            time.sleep(0.001)
        note("iprobe", status.Get_tag(), digest(comm.recv(source=0, tag=12)["big"]))
        msg = comm.Mprobe(source=0, tag=MPI.ANY_TAG, status=status)
        out = np.empty(status.Get_count(MPI.DOUBLE))
        msg.Recv(out)
        note("mprobe", status.Get_tag(), status.Get_count(MPI.BYTE), digest(out))


def ring_of_large_sends() -> None:
    right, left = (rank + 1) % size, (rank - 1) % size
    out = np.empty(6 * LARGE // 8)
    req = comm.Isend(data(rank, 6 * LARGE), dest=right, tag=21)
    comm.Recv(out, source=left, tag=21)
    req.Wait()
    note("ring", left, digest(out))


def ssend_before_recv() -> None:
    if rank == 0:
        comm.Ssend(data(8, SMALL), dest=1, tag=31)
        comm.Ssend(data(9, 4 * LARGE), dest=1, tag=32)
        comm.ssend({"x": data(10, 2 * LARGE)}, dest=1, tag=33)
        note("ssend done")
    elif rank == 1:
        time.sleep(0.2)
        small, large = np.empty(SMALL // 8), np.empty(4 * LARGE // 8)
        comm.Recv(small, source=0, tag=31)
        comm.Recv(large, source=0, tag=32)
        note("ssend", digest(small), digest(large), digest(comm.recv(source=0, tag=33)["x"]))


def cancel_then_receive() -> None:
    if rank == 0:
        comm.Send(data(11, 2 * LARGE), dest=1, tag=41)
    elif rank == 1:
        stray = comm.Irecv(np.empty(8), source=0, tag=40)
        stray.Cancel()
        status = MPI.Status()
        stray.Wait(status)
        out = np.empty(2 * LARGE // 8)
        comm.Recv(out, source=0, tag=41)
        note("cancel", status.Is_cancelled(), digest(out))


def self_sends() -> None:
    out = np.empty(4 * LARGE // 8)
    req = comm.Isend(data(rank, 4 * LARGE), dest=rank, tag=51)
    comm.Recv(out, source=rank, tag=51)
    req.Wait()
    # (a blocking send of a large message to itself before the receive hangs under MPICH: non-blocking here)
    req = comm.isend(data(rank + 2, 2 * LARGE), dest=rank, tag=52)
    note("self", digest(out), digest(comm.recv(source=rank, tag=52)))
    req.wait()


CASES = [
    many_isends_before_irecvs, irecv_posted_late, head_to_head_sendrecv, any_source_mix, probe_then_recv,
    ring_of_large_sends, ssend_before_recv, cancel_then_receive, self_sends,
]
for case in CASES:
    if size > 1 or case in (self_sends,):
        case()
    comm.Barrier()
OUT.close()
