"""Start N ranks: asynchronous invocations (``InvocationType=Event``) from a thread pool, or a tree.

Direct: the launcher invokes every rank itself, `workers` calls in flight.

Tree (``arity`` k > 0): the launcher invokes at most k ranks, each heading a
contiguous block of ranks; a head invokes up to k sub-blocks of its block
before it joins (see ``handler._invoke_subtree``), and so on. 1024 ranks at
k=16 cost the launcher 16 API calls, and the tree is 3 levels deep.
Ranks then need ``lambda:InvokeFunction`` on their own function (docs/lambda.md).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .aws_errors import explain
from .event import Fanout, RankEvent, split

WORKERS = 32  # invocations in flight from the launcher
TREE_ABOVE = 64  # "auto": ranks beyond which the launcher uses a tree
AUTO_ARITY = 16


def choose_arity(size: int, arity: int | None) -> int:
    """None: automatic (direct up to TREE_ABOVE ranks); 0: direct; k > 0: a tree of that arity."""
    if arity is None:
        return 0 if size <= TREE_ABOVE else AUTO_ARITY
    return arity


def heads(base: RankEvent, size: int, arity: int) -> list[RankEvent]:
    """The events the launcher sends itself: every rank (direct), or the heads of the top-level blocks."""
    if arity == 0:
        return [base.for_subtree(Fanout(r, r + 1, 1)) for r in range(size)]
    return [base.for_subtree(block) for block in split(0, size, arity)]


def invoke_all(
    lam: Any,
    function: str,
    events: list[RankEvent],
    on_invoked: Callable[[RankEvent], None],
    workers: int = WORKERS,
) -> dict[int, str]:
    """Invoke every event; returns {rank: why} for those that could not be invoked.

    After the first failure the remaining invocations are not attempted (the
    job cannot run without them); they are reported as not invoked.
    """
    failed: dict[int, str] = {}
    stop = threading.Event()
    lock = threading.Lock()

    def invoke(event: RankEvent) -> None:
        rank = event.spec.rank
        if stop.is_set():
            with lock:
                failed[rank] = "not invoked: an earlier invocation failed"
            return
        try:
            reply = lam.invoke(FunctionName=function, InvocationType="Event", Payload=json.dumps(event.to_event()))
            if reply.get("StatusCode") != 202:
                raise RuntimeError(f"Lambda answered {reply.get('StatusCode')} instead of 202")
        except Exception as exc:  # noqa: BLE001 - every failure is reported with its rank
            stop.set()
            with lock:
                failed[rank] = explain(exc, f"invoke rank {rank}")
            return
        on_invoked(event)

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(events)))) as pool:
        list(pool.map(invoke, events))
    return failed


def block_of(event: RankEvent) -> range:
    """The ranks an invoked event stands for (itself, or its whole block of the tree)."""
    if event.fanout is None:
        return range(event.spec.rank, event.spec.rank + 1)
    return range(event.fanout.lo, event.fanout.hi)
