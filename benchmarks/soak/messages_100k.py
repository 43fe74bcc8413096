"""Soak: N ranks exchange many messages (default 100k in total) of random sizes and tags with random peers.

An mpi4py program (runs unchanged under ``fmpirun`` and ``mpiexec``):

    fmpirun -n 8 python benchmarks/soak/messages_100k.py
    fmpirun -n 8 --channel relay python benchmarks/soak/messages_100k.py --messages 20000
    mpiexec -n 8 python benchmarks/soak/messages_100k.py                  # the reference MPI

Every rank derives the same global schedule from ``--seed``: message i goes
from a sender to a random peer (itself included) with one of ``--tags``
random tags (0 and 32767 among them) and a random body of 0 B .. 1 MiB,
skewed small (1 % empty, 1 % exactly 1 MiB, 10 % 4 KiB .. 1 MiB and the rest
1 B .. 4 KiB, log-uniform). Each message is a 48-byte header + the body; the
header carries the sender, receiver, tag, a sequence number per
(sender, receiver, tag), one per (sender, receiver), the body length and the
body's CRC-32.

Rounds of ``--per-round`` messages per rank, alternating two receive styles:

* posted rounds: every receive is an ``Irecv`` for a specific source and tag
  (in schedule order, exact size), every send an ``Isend``, one ``Waitall``;
  MPI's non-overtaking rule makes the k-th receive for (source, tag) match the
  k-th message sent on it, so each header must be exactly the scheduled one;
* probe rounds: ``Isend`` everything, then ``Probe(ANY_SOURCE, ANY_TAG)`` +
  ``Recv`` until the round's known count has arrived, ``Waitall`` the sends,
  ``Barrier`` (so no message of the next round exists while a rank counts
  this one: deadlock-free even when sends complete only when received).
  With ANY_TAG every message of a pair is eligible, so the per-pair sequence
  number must advance by exactly one.

Receivers count lost (a scheduled message never seen), duplicated (a sequence
number seen again), out of order (any other unexpected sequence number), bad
checksums and bad headers; at the end the counts are reduced and each rank
reports its peak RSS (VmHWM). Rank 0 prints a table and one ``SOAK-RESULT``
JSON line; the exit status is 1 if anything was lost, duplicated, reordered or
corrupted.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import zlib

import numpy as np
from mpi4py import MPI

HEADER = struct.Struct("<IIIIQQQI4x")  # magic, sender, receiver, tag, tag_seq, pair_seq, body_len, crc32
HEADER_SIZE = HEADER.size  # 48
MAGIC = 0x534F414B  # "SOAK"
MAX_BODY = 1 << 20

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--messages", type=int, default=100_000, help="messages in total over all ranks (default %(default)s)")
p.add_argument("--per-round", type=int, default=40, help="messages each rank sends per round (default %(default)s)")
p.add_argument("--tags", type=int, default=6, help="distinct tags (default %(default)s)")
p.add_argument("--max-size", type=int, default=MAX_BODY, help="largest body in bytes (default 1 MiB)")
p.add_argument("--seed", type=int, default=20240607)
p.add_argument("--mode", choices=["mixed", "posted", "probe"], default="mixed", help="receive styles (default: alternate)")
p.add_argument("--quiet", action="store_true", help="no progress lines")
p.add_argument("--fault", choices=["corrupt", "swap"],
               help="check the checker: rank 0 flips a body byte after its checksum (corrupt) or sends two messages of "
                    "one (dest, tag) in swapped order in its first probe round that has such a pair (swap)")
args = p.parse_args()


# ---------------------------------------------------------------- the global schedule (the same on every rank)
def schedule(total: int, n: int, per_round: int, tags: int, max_size: int, seed: int):
    """Arrays over all messages, in round-major order: round, sender, dest, tag, size."""
    rng = np.random.default_rng(seed)
    per_full_round = n * per_round
    rounds = max(1, -(-total // per_full_round))
    idx = np.arange(total)
    rnd = idx // per_full_round
    sender = (idx % per_full_round) // per_round
    # A last partial round: spread its messages over the senders.
    last = rnd == rounds - 1
    k = int(last.sum())
    if k and k < per_full_round:
        sender[last] = np.arange(k) % n
    dest = rng.integers(0, n, total)
    tag_values = np.unique(np.concatenate([[0, 32767], rng.integers(1, 32767, max(0, tags - 2))]))[:max(tags, 1)]
    tag = tag_values[rng.integers(0, len(tag_values), total)]
    u = rng.random(total)
    small = np.exp(rng.uniform(0, np.log(4096), total)).astype(np.int64)  # 1 B .. 4 KiB
    large = np.exp(rng.uniform(np.log(4096), np.log(max_size), total)).astype(np.int64)  # 4 KiB .. max
    sizes = np.where(u < 0.88, small, large)
    sizes[u >= 0.98] = 0
    sizes[u >= 0.99] = max_size
    sizes = np.minimum(sizes, max_size)
    return rnd.astype(np.int64), sender.astype(np.int64), dest.astype(np.int64), tag.astype(np.int64), sizes, rounds


rnd, snd, dst, tag, sizes, rounds = schedule(args.messages, size, args.per_round, args.tags, args.max_size, args.seed)

# Sequence numbers of every message, per (sender, dest, tag) and per (sender, dest), in send order.
tag_seq = np.empty(len(rnd), dtype=np.int64)
pair_seq = np.empty(len(rnd), dtype=np.int64)
_tag_next: dict = {}
_pair_next: dict = {}
for i, (s, d, t) in enumerate(zip(snd.tolist(), dst.tolist(), tag.tolist())):
    tag_seq[i] = _tag_next.get((s, d, t), 0)
    _tag_next[(s, d, t)] = tag_seq[i] + 1
    pair_seq[i] = _pair_next.get((s, d), 0)
    _pair_next[(s, d)] = pair_seq[i] + 1

# Body bytes: slices of one random pool, at a random offset per message (so bodies differ).
pool = np.random.default_rng(args.seed + 1 + rank).integers(0, 256, 2 * MAX_BODY + 4096, dtype=np.uint8)
offsets = np.random.default_rng(args.seed + 100 + rank).integers(0, MAX_BODY + 4096, len(rnd))

# Round boundaries (messages are in round-major order).
round_starts = np.searchsorted(rnd, np.arange(rounds + 1))

stats = {k: 0 for k in ("sent", "received", "bytes_sent", "bytes_received", "lost", "duplicated", "out_of_order",
                        "bad_checksum", "bad_header")}
seen_tag: dict = {}  # (sender, tag) -> next expected tag_seq
seen_pair: dict = {}  # sender -> next expected pair_seq
problems: list[str] = []


def note(kind: str, message: str) -> None:
    stats[kind] += 1
    if len(problems) < 10:
        problems.append(f"rank {rank}: {kind}: {message}")


def make_message(i: int) -> np.ndarray:
    n = int(sizes[i])
    buf = np.empty(HEADER_SIZE + n, dtype=np.uint8)
    body = pool[int(offsets[i]) : int(offsets[i]) + n]
    buf[HEADER_SIZE:] = body
    HEADER.pack_into(buf, 0, MAGIC, rank, int(dst[i]), int(tag[i]), int(tag_seq[i]), int(pair_seq[i]), n,
                     zlib.crc32(body))
    return buf


def check(buf: np.ndarray, source: int, msg_tag: int, length: int, want: int | None) -> None:
    """Verify one received message; `want`: the schedule index it must be (posted rounds), else None."""
    stats["received"] += 1
    stats["bytes_received"] += length
    if length < HEADER_SIZE:
        note("bad_header", f"{length} bytes from {source} tag {msg_tag}: shorter than a header")
        return
    magic, s, d, t, ts, ps, n, crc = HEADER.unpack_from(buf, 0)
    if magic != MAGIC or s != source or d != rank or t != msg_tag or n != length - HEADER_SIZE:
        note("bad_header", f"from {source} tag {msg_tag}: header says sender {s} dest {d} tag {t} len {n} (got {length})")
        return
    if zlib.crc32(buf[HEADER_SIZE:length]) != crc:
        note("bad_checksum", f"from {source} tag {t} seq {ts}")
    key = (s, t)
    expect_tag = seen_tag.get(key, 0)
    if ts == expect_tag:
        seen_tag[key] = ts + 1
    elif ts < expect_tag:
        note("duplicated", f"from {s} tag {t}: seq {ts} again (expected {expect_tag})")
    else:
        note("out_of_order", f"from {s} tag {t}: seq {ts} where {expect_tag} was next")
        seen_tag[key] = ts + 1
    if want is None:  # ANY_TAG receives: the pair's stream must be in order as a whole
        expect_pair = seen_pair.get(s, 0)
        if ps != expect_pair:
            note("out_of_order" if ps > expect_pair else "duplicated", f"from {s}: pair seq {ps} where {expect_pair} was next")
        seen_pair[s] = max(expect_pair, ps + 1)
    else:
        seen_pair[s] = max(seen_pair.get(s, 0), ps + 1)
        if ts != tag_seq[want] or ps != pair_seq[want]:
            if not (ts < expect_tag):  # (already counted as a duplicate)
                note("out_of_order", f"from {s} tag {t}: got seq {ts}/{ps}, scheduled {tag_seq[want]}/{pair_seq[want]}")


def read_peak_rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def inject(fault: str, mine: list[int], bufs: list[np.ndarray], probe_round: bool) -> bool:
    """Tamper with this round's outgoing messages (once); True when done."""
    if fault == "corrupt":
        for b in bufs:
            if len(b) > HEADER_SIZE:
                b[HEADER_SIZE] ^= 0xFF
                return True
        return False
    if not probe_round:
        return False
    first: dict = {}
    for j, i in enumerate(mine):
        key = (int(dst[i]), int(tag[i]))
        if key in first:
            k = first[key]
            mine[j], mine[k] = mine[k], mine[j]
            bufs[j], bufs[k] = bufs[k], bufs[j]
            return True
        first[key] = j
    return False


fault_done = False
comm.Barrier()
t0 = MPI.Wtime()
progress_every = max(1, rounds // 10)
for r in range(rounds):
    lo, hi = int(round_starts[r]), int(round_starts[r + 1])
    mine = [i for i in range(lo, hi) if snd[i] == rank]
    incoming = [i for i in range(lo, hi) if dst[i] == rank]
    probe_round = args.mode == "probe" or (args.mode == "mixed" and r % 2 == 1)
    send_bufs = [make_message(i) for i in mine]
    if args.fault and rank == 0 and not fault_done:
        fault_done = inject(args.fault, mine, send_bufs, probe_round)
    if not probe_round:
        recv_bufs = [np.empty(HEADER_SIZE + int(sizes[i]), dtype=np.uint8) for i in incoming]
        reqs = [comm.Irecv(b, source=int(snd[i]), tag=int(tag[i])) for b, i in zip(recv_bufs, incoming)]
        reqs += [comm.Isend(b, dest=int(dst[i]), tag=int(tag[i])) for b, i in zip(send_bufs, mine)]
        statuses = [MPI.Status() for _ in reqs]
        MPI.Request.Waitall(reqs, statuses)
        for b, i, st in zip(recv_bufs, incoming, statuses):
            check(b, st.Get_source(), st.Get_tag(), st.Get_count(MPI.BYTE), i)
    else:
        sends = [comm.Isend(b, dest=int(dst[i]), tag=int(tag[i])) for b, i in zip(send_bufs, mine)]
        status = MPI.Status()
        for _ in range(len(incoming)):
            comm.Probe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
            source, msg_tag, count = status.Get_source(), status.Get_tag(), status.Get_count(MPI.BYTE)
            b = np.empty(count, dtype=np.uint8)
            comm.Recv(b, source=source, tag=msg_tag)
            check(b, source, msg_tag, count, None)
        MPI.Request.Waitall(sends)
        comm.Barrier()
    stats["sent"] += len(mine)
    stats["bytes_sent"] += sum(HEADER_SIZE + int(sizes[i]) for i in mine)
    if rank == 0 and not args.quiet and (r + 1) % progress_every == 0:
        print(f"round {r + 1}/{rounds}  {MPI.Wtime() - t0:.1f} s", flush=True)

comm.Barrier()
elapsed = MPI.Wtime() - t0

# Lost: scheduled messages to this rank whose sequence numbers were never reached.
for (s, d, t), count in _tag_next.items():
    if d == rank:
        got = seen_tag.get((s, t), 0)
        if got < count:
            note("lost", f"from {s} tag {t}: {count - got} of {count} never arrived")
expected_in = int(np.count_nonzero(dst == rank))
if stats["received"] != expected_in:
    problems.append(f"rank {rank}: received {stats['received']} messages, {expected_in} scheduled")

row = dict(stats, rank=rank, peak_rss_mib=round(read_peak_rss_kib() / 1024, 1), problems=problems)
rows = comm.gather(row, root=0)
bad = sum(row[k] for k in ("lost", "duplicated", "out_of_order", "bad_checksum", "bad_header")) + (
    stats["received"] != expected_in)
bad_total = comm.allreduce(bad, op=MPI.SUM)

if rank == 0:
    total_bytes = sum(x["bytes_sent"] for x in rows)
    print()
    print(f"{args.messages} messages, {size} ranks, {rounds} rounds of {args.per_round} per rank, mode {args.mode}, "
          f"{len(np.unique(tag))} tags, bodies 0..{args.max_size} B (mean {sizes.mean():.0f} B)")
    print()
    print("| rank | sent | received | MiB sent | MiB received | lost | duplicated | out of order | bad checksum | bad header | peak RSS |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for x in rows:
        print(f"| {x['rank']} | {x['sent']} | {x['received']} | {x['bytes_sent'] / 2**20:.1f} | {x['bytes_received'] / 2**20:.1f} | "
              f"{x['lost']} | {x['duplicated']} | {x['out_of_order']} | {x['bad_checksum']} | {x['bad_header']} | {x['peak_rss_mib']} MiB |")
    tot = {k: sum(x[k] for x in rows) for k in stats}
    print(f"| all | {tot['sent']} | {tot['received']} | {tot['bytes_sent'] / 2**20:.1f} | {tot['bytes_received'] / 2**20:.1f} | "
          f"{tot['lost']} | {tot['duplicated']} | {tot['out_of_order']} | {tot['bad_checksum']} | {tot['bad_header']} | "
          f"max {max(x['peak_rss_mib'] for x in rows)} MiB |")
    print()
    print(f"time {elapsed:.2f} s: {tot['received'] / elapsed:.0f} messages/s, {total_bytes / elapsed / 2**20:.1f} MiB/s")
    for x in rows:
        for line in x["problems"]:
            print(line, file=sys.stderr)
    summary = {"messages": args.messages, "ranks": size, "rounds": rounds, "mode": args.mode, "seconds": round(elapsed, 3),
               "bytes": total_bytes, "ok": bad_total == 0,
               **{k: tot[k] for k in stats}, "peak_rss_mib": [x["peak_rss_mib"] for x in rows]}
    print("SOAK-RESULT " + json.dumps(summary), flush=True)
sys.exit(1 if bad_total else 0)
