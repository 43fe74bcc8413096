"""Several ranks in one test process that join a real relay exactly as ranks of a job do.

Each rank goes through ``bootstrap.join`` (shared port, OBSERVE, REGISTER,
WORLD, engine with the relay attached), so links are planned and made for
real over loopback: direct, punched (simultaneous open from the shared
ports) or relayed, as the channel option says.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from fmpi.launcher.job import Job
from fmpi.rank.join import RankSession, join
from fmpi.relay_server.server import RelayThread
from fmpi.transport.engine import Engine
from fmpi.transport.options import TransportOptions


class RelayedWorld:
    def __init__(self, n: int, options: TransportOptions | None = None, **relay_options: Any) -> None:
        self.relay = RelayThread("127.0.0.1", 0, **relay_options)
        self.url = "tcp://{}:{}".format(*self.relay.address)
        self.job = Job(self.url, n, 10.0)
        self.sessions: list[RankSession] = [None] * n  # type: ignore[list-item]
        errors: list[BaseException] = []

        def enter(r: int) -> None:
            try:
                self.sessions[r] = join(self.job.spec(r), options=options or TransportOptions())
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=enter, args=(r,)) for r in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        if errors:
            self.close()
            raise errors[0]

    @property
    def engines(self) -> list[Engine]:
        return [s.engine for s in self.sessions]

    def run(self, fn: Callable[[int, Engine], Any], timeout: float = 60) -> list[Any]:
        """fn(rank, engine) on every rank at once, in threads; returns the results (re-raises a failure)."""
        results: list[Any] = [None] * len(self.sessions)
        errors: list[BaseException | None] = [None] * len(self.sessions)

        def body(r: int) -> None:
            try:
                results[r] = fn(r, self.sessions[r].engine)
            except BaseException as exc:  # noqa: BLE001
                errors[r] = exc

        threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(len(self.sessions))]
        for t in threads:
            t.start()
        end = time.monotonic() + timeout
        while any(t.is_alive() for t in threads) and not any(errors):
            if time.monotonic() > end:
                raise TimeoutError(f"a rank did not finish within {timeout}s\n{self.dump()}")
            threads[[t.is_alive() for t in threads].index(True)].join(0.05)
        for r, exc in enumerate(errors):  # the first failure, without waiting for ranks it left stuck
            if exc is not None:
                raise AssertionError(f"rank {r} failed: {exc!r}\n{self.dump()}") from exc
        return results

    def dump(self) -> str:
        """Every rank's view of its peers and streams (for failure messages)."""
        lines = []
        for e in self.engines:
            for r, p in sorted(e.core.peers.items()):
                st = p.stream
                lines.append(
                    f"rank {e.rank} -> {r}: {p.state.name} kind={p.kind} failovers={p.failovers} "
                    f"awaiting_resume={p.awaiting_resume} errors={p.errors} | next_seq={st.next_seq} "
                    f"next_unsent={st.next_unsent} unacked={[x.seq for x in list(st.unacked)[:4]]}+{len(st.unacked)} "
                    f"carrier={type(st.carrier).__name__} recv_next={st.recv_next} acked_out={st.acked_out} "
                    f"sync={sorted(st.sync)[:4]} inflight={r in e.core.inflight}"
                )
            posted, unexpected = e.core.matcher.pending_counts()
            lines.append(f"rank {e.rank}: posted={posted} unexpected={unexpected} relay queued={e.relay.has_queued()}")
        return "\n".join(lines)

    def finalize(self) -> None:
        threads = [threading.Thread(target=s.finalize) for s in self.sessions if s is not None]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)

    def close(self) -> None:
        """Stop everything without letting a rank end the test process (it would, on losing the relay)."""
        for s in self.sessions:
            if s is not None and not s._closed:
                s._closed = True
                s.engine.abandon()
                if s.engine.relay is not None:
                    s.engine.relay.sock.close()
        self.job.end()
        self.relay.stop()
