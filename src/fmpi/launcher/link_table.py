"""Link statistics as the launcher sees them: which channel each rank pair used and how long set-up took.

Ranks report their links twice: as each comes up (a LINK frame, from the
pair's lower rank, shown by ``fmpirun --verbose``), and all together when
they finalize (with FINISHED). ``LinkTable`` merges both into one entry per
pair; ``summary()`` is the line fmpirun prints at the end of a job:

    links: 6 (0 direct, 4 punched, 2 relayed); set-up median 4.1 ms, max 3.02 s; 0 failed over

(with "; N with shared memory" after the counts when links between ranks
on one host carry large payloads through shared-memory lanes.)
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

KINDS = ("direct", "punched", "relayed")


@dataclass
class LinkTable:
    links: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)

    def add(self, rank: int, report: dict[str, Any]) -> tuple[int, int] | None:
        """Merge one rank's report on its link to ``report["peer"]``; returns the pair."""
        peer, kind = report.get("peer"), report.get("kind")
        if not isinstance(peer, int) or kind not in KINDS or peer == rank:
            return None
        pair = (min(rank, peer), max(rank, peer))
        entry = self.links.setdefault(pair, {"kind": kind, "seconds": None, "failovers": 0, "shared_memory": False})
        entry["kind"] = kind
        entry["shared_memory"] = report.get("shared_memory") is True  # (the latest word: a failover ends it)
        seconds = report.get("seconds")
        if isinstance(seconds, (int, float)) and (entry["seconds"] is None or seconds > entry["seconds"]):
            entry["seconds"] = float(seconds)  # the slower side: set-up is done when both ends are
        if isinstance(report.get("why"), str):
            entry["why"] = report["why"]
        failovers = report.get("failovers")
        if isinstance(failovers, int):
            entry["failovers"] = max(entry["failovers"], failovers)
        if report.get("event") == "failover":
            entry["failovers"] = max(entry["failovers"], 1)
        return pair

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(KINDS, 0)
        for entry in self.links.values():
            out[entry["kind"]] += 1
        return out

    def summary(self) -> str | None:
        if not self.links:
            return None
        counts = self.counts()
        text = f"links: {len(self.links)} (" + ", ".join(f"{counts[k]} {k}" for k in KINDS) + ")"
        shared = sum(1 for e in self.links.values() if e.get("shared_memory"))
        if shared:
            text += f"; {shared} with shared memory"
        times = [e["seconds"] for e in self.links.values() if e["seconds"] is not None]
        if times:
            text += f"; set-up median {_duration(statistics.median(times))}, max {_duration(max(times))}"
        failovers = sum(1 for e in self.links.values() if e["failovers"])
        return text + f"; {failovers} failed over"

    def details(self) -> list[str]:
        return [describe(pair, entry) for pair, entry in sorted(self.links.items())]


def describe(pair: tuple[int, int], entry: dict[str, Any]) -> str:
    text = f"link {pair[0]}-{pair[1]}: {entry['kind']}"
    if entry.get("seconds") is not None:
        text += f", set-up {_duration(entry['seconds'])}"
    if entry.get("why") and entry.get("kind") == "relayed":
        text += f" ({entry['why']})"
    if entry.get("shared_memory"):
        text += ", shared memory"
    if entry.get("failovers"):
        text += ", failed over to the relay"
    return text


def describe_event(body: dict[str, Any]) -> str:
    """One verbose line for a LINK event as it forms."""
    pair = (min(body["rank"], body["peer"]), max(body["rank"], body["peer"]))
    if body.get("event") == "failover":
        return f"link {pair[0]}-{pair[1]}: failed over to the relay"
    return describe(pair, {"kind": body.get("kind"), "seconds": body.get("seconds"), "shared_memory": body.get("shared_memory"),
                           "why": body.get("why")})


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"
