"""Requests this process made to services that bill per request (a checkpoint's S3 or Redis), counted where made.

The checkpoint stores count each request they send (``count("s3", "PUT")``);
a Lambda rank reports ``snapshot()`` to fmpirun when it ends, and fmpirun adds
its own (finding and removing checkpoints) to the job's cost report. A warm
Lambda sandbox serves several invocations in one process: the handler calls
``reset()`` at the start of each. Retries that the SDK makes inside one call
are not seen here (they are rare, and S3 bills them too: the count is a floor).
"""

from __future__ import annotations

import threading
from collections import Counter

_lock = threading.Lock()
_counts: Counter[tuple[str, str]] = Counter()


def count(service: str, operation: str, n: int = 1) -> None:
    """Record `n` requests of `operation` (``PUT``, ``GET``, ``LIST``, ``DELETE``, ``SET``, ``SCAN``...) to `service`."""
    with _lock:
        _counts[(service, operation)] += n


def snapshot() -> dict[str, dict[str, int]]:
    """{service: {operation: requests}} so far."""
    out: dict[str, dict[str, int]] = {}
    with _lock:
        for (service, operation), n in sorted(_counts.items()):
            out.setdefault(service, {})[operation] = n
    return out


def reset() -> None:
    with _lock:
        _counts.clear()


def merge(into: dict[str, dict[str, int]], more: dict) -> dict[str, dict[str, int]]:
    """Add `more` (a snapshot, perhaps from another process: checked) to `into`; returns `into`."""
    for service, operations in (more or {}).items():
        if not isinstance(operations, dict):
            continue
        for operation, n in operations.items():
            if isinstance(n, int) and n >= 0:
                bucket = into.setdefault(str(service), {})
                bucket[str(operation)] = bucket.get(str(operation), 0) + n
    return into
