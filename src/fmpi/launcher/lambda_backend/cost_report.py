"""What a Lambda job cost: the ``fmpirun: cost: ...`` line after every job, and ``--report FILE.json``.

Made of, per launch (``--max-runtime`` relaunches add up):

* **GB-seconds**: each invocation's *Billed Duration* x its memory, from
  Lambda's REPORT lines (``billing``); an invocation whose line fmpirun
  could not read is estimated from fmpirun's clock (its invocation until
  its end, or until the job's end) and marked ``"source": "estimate"``;
* **requests**: every invocation started (the ranks, the invocation tree's
  own calls, the ping);
* **relay data**: the bytes each rank sent to and received from the relay
  (rendezvous, output, relayed links), as the ranks counted them;
* **checkpoint requests**: the S3 / Redis requests of ``fmpi.checkpoint``,
  counted by the ranks and by fmpirun (``util.usage``);
* **dollars**: each of those at the region's prices (``prices``).

The report adds, per rank, its invocation (request id, log stream), its
timings (join, run, total), its bytes and the kind of each of its links.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...util import usage
from ..link_table import LinkTable
from .billing import Report
from .prices import Prices

REPORT_FORMAT = 1
GIB = 2**30


@dataclass
class LaunchFacts:
    """What one launch of the job did, as fmpirun saw it (the Watcher's records, the job's links, the REPORT lines)."""

    job: str
    size: int
    exit_status: int
    function: str
    memory_mb: int
    architecture: str
    seconds: float  # from the invocations to the job's end, on fmpirun's clock
    invoked: int  # rank invocations started (by fmpirun and by the invocation tree)
    invocations: dict[int, dict] = field(default_factory=dict)  # rank -> what it told (Watcher.invocations)
    finished_after: dict[int, float] = field(default_factory=dict)  # rank -> seconds from invocation to its end
    reports: dict[str, Report] = field(default_factory=dict)  # request id -> its REPORT line
    ping: Report | None = None
    links: LinkTable = field(default_factory=LinkTable)
    launcher_requests: dict[str, dict[str, int]] = field(default_factory=dict)  # fmpirun's own checkpoint requests
    spares: list[str] = field(default_factory=list)  # request ids of the spares that found the world complete


def launch_record(facts: LaunchFacts, prices: Prices) -> dict[str, Any]:
    """One launch's part of the report: its invocations, ranks, totals and dollars."""
    invocations = _invocations(facts)
    requests = usage.merge({}, facts.launcher_requests)
    relay_bytes = 0
    for info in facts.invocations.values():
        usage.merge(requests, info.get("requests") or {})
        moved = info.get("bytes") or {}
        relay_bytes += int(moved.get("relay_sent", 0)) + int(moved.get("relay_received", 0))
    totals = {
        "invocations": len(invocations),
        "from_report_lines": sum(1 for i in invocations if i["source"] == "report"),
        "gb_seconds": round(sum(i["gb_seconds"] for i in invocations), 6),
        "requests": facts.invoked + (1 if facts.ping is not None else 0),
        "spares_not_needed": len(facts.spares),
        "relay_bytes": relay_bytes,
        "checkpoint_requests": requests,
    }
    return {
        "job": facts.job, "size": facts.size, "exit_status": facts.exit_status, "function": facts.function,
        "memory_mb": facts.memory_mb, "architecture": facts.architecture, "seconds": round(facts.seconds, 3),
        "totals": totals, "dollars": dollars(totals, facts.architecture, prices),
        "invocations": invocations, "ranks": _ranks(facts),
    }


def _invocations(facts: LaunchFacts) -> list[dict[str, Any]]:
    out = []
    if facts.ping is not None:
        out.append({"rank": None, "what": "ping", "source": "report", **_billed(facts.ping)})
    for request_id in facts.spares:  # (they exited at once: billed for their start only)
        report = facts.reports.get(request_id)
        entry = {"rank": None, "what": "spare, not needed", "request_id": request_id}
        out.append({**entry, "source": "report", **_billed(report)} if report is not None
                   else {**entry, "source": "estimate", "billed_ms": 0.0, "memory_mb": facts.memory_mb, "gb_seconds": 0.0})
    heard, seen = [], set()
    for rank in sorted(facts.invocations):  # (several ranks per function: one invocation, billed once)
        request_id = facts.invocations[rank].get("request_id")
        if request_id not in seen:
            heard.append(rank)
        if request_id:
            seen.add(request_id)
    unheard_count = max(0, facts.invoked - len(heard) - len(facts.spares))
    unheard = [r for r in range(facts.size) if r not in facts.invocations][:unheard_count]
    # (more unheard invocations than free slots: spares that never said anything, counted as rank None)
    unheard += [None] * (unheard_count - len(unheard))
    for rank in heard + unheard:
        info = facts.invocations.get(rank, {}) if rank is not None else {}
        report = facts.reports.get(info.get("request_id") or "")
        entry: dict[str, Any] = {"rank": rank, "what": "rank", "request_id": info.get("request_id"),
                                 "log_stream": info.get("log_stream")}
        if report is not None:
            entry.update(source="report", **_billed(report))
        else:  # fmpirun's clock: from the invocation to the rank's end, else to the job's end
            seconds = facts.finished_after.get(rank, facts.seconds) if rank is not None else facts.seconds
            entry.update(source="estimate", billed_ms=round(seconds * 1000, 3), memory_mb=facts.memory_mb,
                         gb_seconds=round(seconds * facts.memory_mb / 1024, 6))
        out.append(entry)
    return out


def _billed(report: Report) -> dict[str, Any]:
    return {"request_id": report.request_id, "billed_ms": report.billed_ms, "memory_mb": report.memory_mb,
            "duration_ms": report.duration_ms, "init_ms": report.init_ms,
            "max_memory_used_mb": report.max_memory_used_mb, "gb_seconds": round(report.gb_seconds(), 6)}


def _ranks(facts: LaunchFacts) -> list[dict[str, Any]]:
    kinds: dict[int, dict[str, str]] = {}
    for (a, b), entry in facts.links.links.items():
        kinds.setdefault(a, {})[str(b)] = entry["kind"]
        kinds.setdefault(b, {})[str(a)] = entry["kind"]
    out = []
    for rank in range(facts.size):
        info = facts.invocations.get(rank, {})
        out.append({
            "rank": rank, "request_id": info.get("request_id"), "exit_status": info.get("exit_status"),
            "timings": info.get("timings") or {}, "finished_after": facts.finished_after.get(rank),
            "bytes": info.get("bytes") or {}, "links": dict(sorted(kinds.get(rank, {}).items(), key=lambda kv: int(kv[0]))),
        })
    return out


def dollars(totals: dict[str, Any], architecture: str, prices: Prices) -> dict[str, float]:
    p = prices.per_unit
    s3 = totals["checkpoint_requests"].get("s3", {})
    redis = totals["checkpoint_requests"].get("redis", {})
    parts = {
        "compute": totals["gb_seconds"] * p.get(f"lambda_gb_second_{architecture}", p["lambda_gb_second_x86_64"]),
        "requests": totals["requests"] * p["lambda_request"],
        "relay": totals["relay_bytes"] / GIB * p["relay_transfer_gb"],
        "checkpoints": ((s3.get("PUT", 0) + s3.get("LIST", 0)) * p["s3_put_request"] + s3.get("GET", 0) * p["s3_get_request"]
                        + sum(redis.values()) * p["redis_request"]),
    }
    parts["total"] = sum(parts.values())
    return {k: round(v, 8) for k, v in parts.items()}


def job_report(launches: list[dict[str, Any]], prices: Prices) -> dict[str, Any]:
    """The whole job (one launch, or several under --max-runtime): the launches and their sums."""
    totals: dict[str, Any] = {"launches": len(launches), "invocations": 0, "from_report_lines": 0, "gb_seconds": 0.0,
                              "requests": 0, "relay_bytes": 0, "spares_not_needed": 0, "checkpoint_requests": {}}
    for launch in launches:
        for key in ("invocations", "from_report_lines", "gb_seconds", "requests", "relay_bytes", "spares_not_needed"):
            totals[key] += launch["totals"][key]
        usage.merge(totals["checkpoint_requests"], launch["totals"]["checkpoint_requests"])
    totals["gb_seconds"] = round(totals["gb_seconds"], 6)
    architecture = launches[-1]["architecture"] if launches else "x86_64"
    return {
        "format": REPORT_FORMAT,
        "prices": {"region": prices.region, "job_region": prices.asked, "as_of": prices.as_of, "source": prices.source,
                   "usd": prices.per_unit},
        "totals": totals, "dollars": dollars(totals, architecture, prices), "launches": launches,
    }


def cost_line(report: dict[str, Any], prices: Prices) -> str:
    """One line for the terminal: what the job cost, and where the numbers come from."""
    t, d = report["totals"], report["dollars"]
    size = report["launches"][-1]["size"] if report["launches"] else 0
    checkpoint = sum(sum(ops.values()) for ops in t["checkpoint_requests"].values())
    source = f"Lambda's REPORT lines for {t['from_report_lines']} of {t['invocations']} invocations"
    if t["from_report_lines"] < t["invocations"]:
        source += ", the rest estimated"
    launches = f" over {t['launches']} launches" if t["launches"] > 1 else ""
    return (
        f"cost: {size} rank{'s' if size != 1 else ''}{launches}, {t['gb_seconds']:.1f} GB-s billed ({source}), "
        f"{t['requests']} requests, relay {t['relay_bytes'] / 2**20:.1f} MB, {checkpoint} checkpoint requests: "
        f"about ${d['total']:.5f} ({prices.describe()}; docs/lambda.md 'What a job cost')"
    )


def check_writable(path: str) -> None:
    """Before anything is deployed: the report's folder must exist (a job's cost is not to be lost at its end)."""
    folder = Path(path).expanduser().resolve().parent
    if not folder.is_dir():
        raise ValueError(f"--report {path}: the folder {folder} does not exist")


def write(path: str, report: dict[str, Any]) -> None:
    Path(path).expanduser().write_text(json.dumps(report, indent=2) + "\n")
