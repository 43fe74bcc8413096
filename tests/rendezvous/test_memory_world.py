"""A whole job over the in-process rendezvous: fmpirun's Job, ranks through ``join``, relayed links through it."""

from __future__ import annotations

import threading
import uuid

import numpy as np

from fmpi.launcher.job import Job
from fmpi.rank.join import join
from fmpi.transport.options import TransportOptions

SIZES = [0, 1, 1000, 70_000, 600_000]  # (the largest crosses several relay chunks)


def _exchange(r: int, e) -> None:
    sends = [e.isend(d, 0, 7, [memoryview(np.full(n, r * 10 + i, np.uint8))]) for d in range(e.size) if d != r
             for i, n in enumerate(SIZES)]
    for s in (s for s in range(e.size) if s != r):
        for i, n in enumerate(SIZES):
            op = e.irecv(s, 0, 7, None)
            e.wait(op, timeout=30)
            got = np.frombuffer(op.payload, np.uint8)
            assert got.size == n and (got == s * 10 + i).all(), f"message {i} from {s} is wrong"
    e.wait_all(sends, timeout=30)


def test_relayed_links_and_finish_through_memory():
    job = Job(f"memory://world-{uuid.uuid4().hex}", 3, 10.0)
    sessions: list = [None] * 3
    failures: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            sessions[r] = join(job.spec(r), options=TransportOptions(channel="relay"))
            _exchange(r, sessions[r].engine)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert not failures, failures
        assert {link["kind"] for s in sessions for link in s.engine.link_stats()} == {"relayed"}
        for s in sessions:
            s.finalize()
        assert job.wait(lambda st: len(st.finished) == 3, 10)
        assert job.state.finished == {0: 0, 1: 0, 2: 0} and job.state.joined == {0, 1, 2}
        assert job.state.world_seconds is not None
    finally:
        job.end()
