"""What Lambda billed each invocation: its REPORT line, read from the function's log or from an Invoke's log tail.

Lambda ends every invocation's log with one platform line::

    REPORT RequestId: 6f1c...  Duration: 812.41 ms  Billed Duration: 1013 ms  Memory Size: 1769 MB
        Max Memory Used: 97 MB  Init Duration: 200.12 ms

(tab-separated; with the function's JSON log format it is a ``platform.report``
record with the same numbers under ``metrics``). *Billed Duration* is what
the GB-seconds are made of: the handler's duration rounded up to the
millisecond and, since August 2025 for on-demand functions, the init phase
too. The ranks are ``Event`` invocations, whose answer carries no log, so
their REPORT lines come from CloudWatch Logs (``FilterLogEvents`` on
``/aws/lambda/NAME``, the permission fmpirun already uses for join failures);
a synchronous invocation (the ping) asks for its log tail (``LogType=Tail``)
and finds it there at once. CloudWatch may take seconds to show a line, so
``read_reports`` polls, with a bound.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from ...lambda_runtime.aws_errors import explain
from ...lambda_runtime.handler import NOT_NEEDED

POLL_INTERVAL = 1.0  # seconds between FilterLogEvents rounds while REPORT lines are missing
_SPARE = re.compile(NOT_NEEDED + r": a spare of job \S+ was not needed \(request ([\w-]+)\)")
_FIELD = re.compile(r"([A-Za-z ]+):\s*([0-9.]+)\s*(ms|MB)?")


@dataclass(frozen=True)
class Report:
    request_id: str
    billed_ms: float
    memory_mb: int
    duration_ms: float | None = None
    init_ms: float | None = None
    max_memory_used_mb: int | None = None

    def gb_seconds(self) -> float:
        return self.billed_ms / 1000 * self.memory_mb / 1024

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_report(message: str) -> Report | None:
    """A REPORT line (text or the JSON log format's ``platform.report``), or None for any other line."""
    text = message.strip()
    if text.startswith("{"):
        return _parse_json(text)
    if not text.startswith("REPORT RequestId:"):
        return None
    head, _, rest = text.partition("\t")
    request_id = head.removeprefix("REPORT RequestId:").strip()
    fields = {name.strip(): float(value) for name, value, _unit in _FIELD.findall(rest)}
    if not request_id or "Billed Duration" not in fields or "Memory Size" not in fields:
        return None
    used = fields.get("Max Memory Used")
    return Report(request_id, fields["Billed Duration"], int(fields["Memory Size"]), fields.get("Duration"),
                  fields.get("Init Duration"), int(used) if used is not None else None)


def _parse_json(text: str) -> Report | None:
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("type") != "platform.report":
        return None
    body = record.get("record") or {}
    metrics = body.get("metrics") or {}
    try:
        return Report(str(body["requestId"]), float(metrics["billedDurationMs"]), int(metrics["memorySizeMB"]),
                      metrics.get("durationMs"), metrics.get("initDurationMs"), metrics.get("maxMemoryUsedMB"))
    except (KeyError, TypeError, ValueError):
        return None


def report_from_tail(log_result: str | None) -> Report | None:
    """The REPORT line in a synchronous Invoke's ``LogResult`` (the log's last 4 KB, base64), if it is there."""
    if not log_result:
        return None
    try:
        tail = base64.b64decode(log_result).decode("utf-8", "replace")
    except ValueError:
        return None
    for line in reversed(tail.splitlines()):
        found = parse_report(line)
        if found is not None:
            return found
    return None


def read_reports(logs: Any, function: str, request_ids: Iterable[str], since_ms: int, wait: float,
                 warn: Callable[[str], None]) -> dict[str, Report]:
    """The REPORT lines of `request_ids` in the function's log, polled for up to `wait` seconds; those found."""
    wanted = set(request_ids)
    found: dict[str, Report] = {}
    group = f"/aws/lambda/{function}"
    deadline = time.monotonic() + wait
    while wanted - found.keys():
        try:
            for report in _reports_since(logs, group, since_ms):
                if report.request_id in wanted:
                    found[report.request_id] = report
        except Exception as exc:  # noqa: BLE001 - the cost is then estimated from fmpirun's own clock
            warn(f"{explain(exc, f'read the REPORT lines in {group}')}; the cost below is estimated from "
                 "fmpirun's clock (logs:FilterLogEvents on the log group gives Lambda's own numbers)")
            return found
        if not wanted - found.keys() or time.monotonic() >= deadline:
            break
        time.sleep(POLL_INTERVAL)
    return found


def unneeded_spares(logs: Any, function: str, job: str, since_ms: int, warn: Callable[[str], None]) -> list[str]:
    """Request ids of the job's spare ranks that found the world complete and exited (``handler.NOT_NEEDED``)."""
    found = []
    token = None
    try:
        while True:
            request: dict[str, Any] = {"logGroupName": f"/aws/lambda/{function}", "startTime": since_ms,
                                       "filterPattern": f"{NOT_NEEDED} {job}"}
            if token:
                request["nextToken"] = token
            page = logs.filter_log_events(**request)
            found += [m.group(1) for e in page.get("events", []) if (m := _SPARE.search(e.get("message", "")))
                      and f"job {job} " in e.get("message", "")]
            token = page.get("nextToken")
            if not token:
                return found
    except Exception as exc:  # noqa: BLE001 - their cost is then estimated
        warn(f"{explain(exc, f'read the spare ranks in /aws/lambda/{function}')}; unneeded spares are estimated")
        return found


def _reports_since(logs: Any, group: str, since_ms: int) -> Iterable[Report]:
    token = None
    while True:
        request: dict[str, Any] = {"logGroupName": group, "startTime": since_ms, "filterPattern": "REPORT"}
        if token:
            request["nextToken"] = token
        page = logs.filter_log_events(**request)
        for event in page.get("events", []):
            report = parse_report(event.get("message", ""))
            if report is not None:
                yield report
        token = page.get("nextToken")
        if not token:
            return
