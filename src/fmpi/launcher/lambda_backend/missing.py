"""The invocations a world that did not fill waited for: their request ids and log streams, so the user can look.

A fill timeout names the missing *slots*; the user needs the *invocations*.
Lambda answers every ``Invoke`` (``InvocationType=Event`` included) with a
request id, the same id the invocation later carries as its
``aws_request_id`` and in its ``START`` / ``REPORT`` lines. fmpirun keeps
the id of each invocation it made (``Watcher.accepted``) and the
incarnation of each rank that joined; those that never joined are named
with their id. Their log streams come from the function's log: a ``START``
line for the id means the invocation started (its stream is where to look:
it may have crashed, hung or been refused before joining); none means
Lambda has not started it (throttled, dropped, still queued), or that
CloudWatch does not show its first line yet.

Ranks below a head of the invocation tree were invoked by that head, which
logs each sub-invocation's request id (``invoked ranks A-B: request id
...``): such ranks are named with the head whose log holds their ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ...lambda_runtime.aws_errors import explain
from ...util.ranges import describe_ranks

SHOWN = 10  # invocations named in full; the rest are counted
STARTS = "?START ?platform.start"  # the START lines (text, or the JSON log format's records): one or the other term
_START = re.compile(r"START RequestId: ([\w-]+)")


def describe(requests: dict[str, dict], joined: set[str], missing: list[int], logs: Any, function: str,
             since_ms: int, warn: Callable[[str], None]) -> str:
    """What to add to a fill timeout's message: the invocations that never joined (empty if none is known)."""
    never = sorted((r for inc, r in requests.items() if inc not in joined), key=lambda r: (r["rank"] < 0, r["rank"]))
    text = ""
    if never:
        streams = log_streams(logs, function, since_ms, {r["request_id"] for r in never if r["request_id"]}, warn)
        more = f" and {len(never) - SHOWN} more" if len(never) > SHOWN else ""
        text = f". Invocations that never joined: {'; '.join(_one(r, streams) for r in never[:SHOWN])}{more}"
    for incarnation, head in requests.items():  # (a head that joined invoked its block's other ranks itself)
        below = [m for m in missing if head["rank"] < m <= head["last"]]
        if below and incarnation in joined:
            which = f"Ranks {describe_ranks(below)} were" if len(below) > 1 else f"Rank {below[0]} was"
            text += (f". {which} invoked by rank {head['rank']} (request id {head['request_id']}), whose log names "
                     f"{'their request ids' if len(below) > 1 else 'its request id'}")
    return text


def _one(request: dict, streams: dict[str, str]) -> str:
    rank, last, rid = request["rank"], request["last"], request["request_id"]
    who = "a spare" if rank < 0 else f"rank {rank}" + (f" (heading ranks {rank}-{last})" if last > rank else "")
    if not rid:
        return f"{who}: Lambda answered no request id"
    where = f"log stream {streams[rid]}" if rid in streams else "no START line in the log yet: Lambda may never have started it"
    return f"{who}: request id {rid}, {where}"


def log_streams(logs: Any, function: str, since_ms: int, request_ids: set[str],
                warn: Callable[[str], None]) -> dict[str, str]:
    """request id -> the log stream of its START line, for those of `request_ids` that started."""
    found: dict[str, str] = {}
    if not request_ids:
        return found
    group = f"/aws/lambda/{function}"
    token = None
    try:
        while True:
            request: dict[str, Any] = {"logGroupName": group, "startTime": since_ms, "filterPattern": STARTS}
            if token:
                request["nextToken"] = token
            page = logs.filter_log_events(**request)
            for event in page.get("events", []):
                rid = _started(event.get("message", ""))
                if rid in request_ids:
                    found[rid] = event.get("logStreamName", "?")
            token = page.get("nextToken")
            if not token or len(found) == len(request_ids):
                return found
    except Exception as exc:  # noqa: BLE001 - the ids alone still say which invocations to look for
        warn(f"{explain(exc, f'read the START lines in {group}')}; the invocations are named without their log streams")
        return found


def _started(message: str) -> str | None:
    """The request id of a START line (text, or the JSON log format's ``platform.start``)."""
    m = _START.search(message)
    if m is not None:
        return m.group(1)
    try:
        record = json.loads(message)
    except ValueError:
        return None
    if isinstance(record, dict) and record.get("type") == "platform.start":
        return str((record.get("record") or {}).get("requestId"))
    return None
