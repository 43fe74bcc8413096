"""Point-to-point semantics exercised on every rank; prints one line per check.

Usage: p2p_semantics.py [large_message_bytes [output_dir]]. Runs under real
MPICH + mpi4py and under fmpirun; the tests compare the two outputs line for line, and every check also asserts its own expected value.
Uses only point-to-point calls (no collectives), so it tests p2p alone.
"""

import mmap
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
right, left = (rank + 1) % size, (rank - 1) % size
out = []


def check(name, value, expected):
    assert value == expected, f"rank {rank}: {name}: got {value!r}, expected {expected!r}"
    out.append(f"{rank} {name} {value!r}")


def p2p_barrier(tag):
    """A barrier made of point-to-point messages (gather to 0, then release)."""
    if rank == 0:
        for src in range(1, size):
            comm.recv(source=src, tag=tag)
        for dst in range(1, size):
            comm.send(None, dest=dst, tag=tag)
    else:
        comm.send(None, dest=0, tag=tag)
        comm.recv(source=0, tag=tag)


# 1. pickled objects around a ring, with status
status = MPI.Status()
got = comm.sendrecv({"from": rank, "data": [rank] * 3}, dest=right, sendtag=7, source=left, recvtag=7, status=status)
check("ring_obj", got, {"from": left, "data": [left] * 3})
check("ring_status", (status.Get_source(), status.Get_tag()), (left, 7))

# 2. non-overtaking: many messages from one sender with the same tag arrive in order
if size > 1:
    if rank == 0:
        for i in range(200):
            comm.send(i, dest=1, tag=3)
    elif rank == 1:
        check("fifo", [comm.recv(source=0, tag=3) for _ in range(200)], list(range(200)))

# 3. tag selection: receive in the opposite order of sending
if size > 1:
    if rank == 0:
        for t in (10, 11, 12):
            comm.send(f"tag{t}", dest=1, tag=t)
    elif rank == 1:
        check("by_tag", [comm.recv(source=0, tag=t) for t in (12, 10, 11)], ["tag12", "tag10", "tag11"])

# 4. ANY_SOURCE / ANY_TAG at rank 0: one message from everyone, status tells who
if rank == 0:
    seen = []
    for _ in range(size - 1):
        st = MPI.Status()
        msg = comm.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
        assert msg == st.Get_source() * 100 + st.Get_tag(), (msg, st)
        seen.append(st.Get_source())
    check("any_source", sorted(seen), list(range(1, size)))
    for dst in range(1, size):  # only now may the others send anything else to rank 0
        comm.send("go", dest=dst, tag=98)
else:
    comm.send(rank * 100 + rank % 5, dest=0, tag=rank % 5)
    comm.recv(source=0, tag=98)

# 5. numpy buffers: typed Send/Recv around the ring, Get_count in elements
for dtype in ("f8", "f4", "i4", "i8", "c16", "u1"):
    a = (np.arange(1000) * (rank + 1)).astype(dtype)
    b = np.empty(1000, dtype=dtype)
    st = MPI.Status()
    comm.Sendrecv(a, dest=right, sendtag=1, recvbuf=b, source=left, recvtag=1, status=st)
    check(f"typed_{dtype}", bool(np.array_equal(b, (np.arange(1000) * (left + 1)).astype(dtype))), True)
check("count_f8", st.Get_count(MPI.UNSIGNED_CHAR), 1000)  # u1 was last

# 6. message specs: [buf, MPI type], [buf, count, type], [buf, (count, displ), type]
a = np.arange(10, dtype="d") + rank
b = np.zeros(10, dtype="d")
comm.Sendrecv([a, MPI.DOUBLE], right, 2, [b, MPI.DOUBLE], left, 2)
check("spec_buf_type", b.tolist(), (np.arange(10) + left).tolist())
b[:] = 0
comm.Sendrecv([a, 4, MPI.DOUBLE], right, 2, [b, 4, MPI.DOUBLE], left, 2)
check("spec_count", b.tolist(), (np.arange(4) + left).tolist() + [0.0] * 6)
b[:] = 0
comm.Sendrecv([a, (3, 2), MPI.DOUBLE], right, 2, [b, (3, 5), MPI.DOUBLE], left, 2)
check("spec_displ", b.tolist(), [0.0] * 5 + (np.arange(2, 5) + left).tolist() + [0.0] * 2)

# 7. buffer-protocol objects: bytearray, memoryview, mmap (anonymous), bytes to send
payload = bytes([rank]) * 4096
m = mmap.mmap(-1, 4096)
comm.Sendrecv([payload, MPI.BYTE], right, 4, [m, 4096, MPI.BYTE], left, 4)
check("mmap_recv", m[:] == bytes([left]) * 4096, True)
ba = bytearray(8)
comm.Sendrecv([memoryview(np.array([rank], dtype="i8")), MPI.BYTE], right, 5, [ba, MPI.BYTE], left, 5)
check("bytearray_recv", int(np.frombuffer(ba, dtype="i8")[0]), left)
src_map = mmap.mmap(-1, 64)
src_map[:] = bytes([rank + 1]) * 64
dst = bytearray(64)
comm.Sendrecv([src_map, MPI.BYTE], right, 6, [dst, MPI.BYTE], left, 6)
check("mmap_send", bytes(dst) == bytes([left + 1]) * 64, True)

# 8. zero-length messages: buffers and objects
empty = np.empty(0, dtype="d")
st = MPI.Status()
comm.Sendrecv(empty, right, 8, np.empty(0, dtype="d"), left, 8, status=st)
check("zero_len_count", st.Get_count(MPI.DOUBLE), 0)
check("zero_len_obj", comm.sendrecv(b"", dest=right, source=left), b"")
check("none_obj", comm.sendrecv(None, dest=right, source=left), None)

# 9. non-blocking: post receives first, Waitall, Waitany, Test
reqs = [comm.Irecv(buf := np.empty(5, dtype="i4"), source=left, tag=20)]
bufs = [buf]
reqs.append(comm.Isend(np.full(5, rank, dtype="i4"), dest=right, tag=20))
MPI.Request.Waitall(reqs)
check("irecv_waitall", bufs[0].tolist(), [left] * 5)
r_obj = comm.irecv(source=left, tag=21)
s_obj = comm.isend(("nb", rank), dest=right, tag=21)
check("irecv_obj", r_obj.wait(), ("nb", left))
s_obj.wait()
reqs = [comm.irecv(source=left, tag=22), comm.isend(rank, dest=right, tag=22)]
done = set()
while len(done) < 2:
    idx, val = MPI.Request.waitany(reqs)
    if idx == 0:
        check("waitany_val", val, left)
    done.add(idx)

# 9b. Test / Testall / test polling, and cancelling a receive nobody will match
r_obj = comm.irecv(source=left, tag=23)
s_obj = comm.isend([rank, "t"], dest=right, tag=23)
while True:
    flag, val = r_obj.test()
    if flag:
        break
check("test_poll", val, [left, "t"])
s_obj.wait()
reqs = [comm.Irecv(tbuf := np.zeros(2, dtype="i8"), source=left, tag=24), comm.Isend(np.array([rank, 7], dtype="i8"), dest=right, tag=24)]
while not MPI.Request.Testall(reqs):
    pass
check("testall", tbuf.tolist(), [left, 7])
lonely = comm.Irecv(np.zeros(1), source=left, tag=25)
lonely.Cancel()
st = MPI.Status()
lonely.Wait(st)
check("cancelled", st.Is_cancelled(), True)

# 10. probe / iprobe with status, then a receive sized from the status
if size > 1:
    if rank == 0:
        comm.Send(np.arange(77, dtype="i8"), dest=1, tag=30)
    elif rank == 1:
        st = MPI.Status()
        comm.Probe(source=0, tag=30, status=st)
        n = st.Get_count(MPI.INT64_T)
        buf = np.empty(n, dtype="i8")
        comm.Recv(buf, source=0, tag=30)
        check("probe_count", n, 77)
        check("iprobe_after", comm.Iprobe(source=0, tag=30), False)

# 11. synchronous send completes only once matched; ssend to self-style pairs
if size > 1:
    if rank == 0:
        comm.ssend("sync", dest=1, tag=40)
        check("ssend_done", True, True)
    elif rank == 1:
        check("ssend_recv", comm.recv(source=0, tag=40), "sync")

# 12. PROC_NULL: sends vanish, receives complete at once with source PROC_NULL
st = MPI.Status()
comm.Send(np.zeros(3), dest=MPI.PROC_NULL)
comm.Recv(np.zeros(3), source=MPI.PROC_NULL, status=st)
check("proc_null", (st.Get_source(), st.Get_count()), (MPI.PROC_NULL, 0))

# 13. messages to self
req = comm.isend("me", dest=rank, tag=50)
check("self_obj", comm.recv(source=rank, tag=50), "me")
req.wait()

# 14. a large message (size given on the command line, default 64 MiB), checksummed
nbytes = int(sys.argv[1]) if len(sys.argv) > 1 else 64 << 20
if size > 1 and rank in (0, size - 1):
    peer = size - 1 - rank
    big = np.arange(nbytes // 8, dtype="f8") + rank
    recv = np.empty_like(big)
    comm.Sendrecv(big, peer, 60, recv, peer, 60)
    check("large", bool(np.array_equal(recv, np.arange(nbytes // 8, dtype="f8") + peer)), True)

# 15. a large pickled object holding arrays (out-of-band path in fmpi)
if size > 1:
    obj = {"w": np.full(300_000, float(rank)), "meta": [rank, "x"]}
    got = comm.sendrecv(obj, dest=right, source=left)
    check("large_obj", (float(got["w"].sum()), got["meta"]), (300_000.0 * left, [left, "x"]))

# 16. Get_processor_name / Wtime are usable
check("wtime_monotonic", MPI.Wtime() <= MPI.Wtime(), True)
check("proc_name_str", isinstance(MPI.Get_processor_name(), str), True)

p2p_barrier(99)
# One file per rank: a launcher may interleave concurrent ranks' stdout mid-line.
if len(sys.argv) > 2:
    with open(f"{sys.argv[2]}/rank{rank}.txt", "w") as f:
        f.write("\n".join(out) + "\n")
else:
    print("\n".join(out), flush=True)
