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
from .throttling import Pacer, invoke_with_backoff

WORKERS = 32  # invocations in flight from the launcher
TREE_ABOVE = 64  # "auto": ranks beyond which the launcher uses a tree
AUTO_ARITY = 16


def choose_arity(size: int, arity: int | None) -> int:
    """None: automatic (direct up to TREE_ABOVE invocations); 0: direct; k > 0: a tree of that arity.
    `size`: the invocations to start (the ranks, or fewer with several ranks per function)."""
    if arity is None:
        return 0 if size <= TREE_ABOVE else AUTO_ARITY
    return arity


def heads(base: RankEvent, size: int, arity: int) -> list[RankEvent]:
    """The events the launcher sends itself: every invocation (direct), or the heads of the top-level blocks.
    With ``base.per_function`` K > 1 an invocation is ranks r..r+K-1, and blocks split on those boundaries."""
    step = base.per_function
    if arity == 0:
        return [base.for_subtree(Fanout(r, min(r + step, size), 1, step)) for r in range(0, size, step)]
    return [base.for_subtree(block) for block in split(0, size, arity, step)]


def invoke_all(
    lam: Any,
    function: str,
    events: list[RankEvent],
    on_invoked: Callable[[RankEvent, str | None], None],
    workers: int = WORKERS,
    pacer: Pacer | None = None,
    on_throttled: Callable[[int], None] | None = None,
) -> dict[int, str]:
    """Invoke every event, paced by `pacer` and retried while throttled (``throttling``); returns {rank: why} for
    those that could not be invoked (`on_throttled(rank)` hears each throttle). `on_invoked(event, request_id)`
    hears each one Lambda accepted, with the request id it answered (the invocation's own: its log lines carry it).

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
        if pacer is not None:
            pacer.acquire(functions_of(event))
        payload = json.dumps(event.to_event())
        try:
            reply = invoke_with_backoff(
                lambda: lam.invoke(FunctionName=function, InvocationType="Event", Payload=payload),
                (lambda _attempt: on_throttled(rank)) if on_throttled is not None else None,
            )
            if reply.get("StatusCode") != 202:
                raise RuntimeError(f"Lambda answered {reply.get('StatusCode')} instead of 202")
        except Exception as exc:  # noqa: BLE001 - every failure is reported with its rank
            stop.set()
            with lock:
                failed[rank] = explain(exc, f"invoke rank {rank}")
            return
        on_invoked(event, reply.get("ResponseMetadata", {}).get("RequestId"))

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(events)))) as pool:
        list(pool.map(invoke, events))
    return failed


def functions_of(event: RankEvent) -> int:
    """The invocations an invoked event stands for (itself, or its whole block of the tree): what Lambda's
    scaling rate counts, whatever the ranks per function."""
    return 1 if event.fanout is None else event.fanout.functions


def block_of(event: RankEvent) -> range:
    """The ranks an invoked event stands for (itself, its function's ranks, or its whole block of the tree)."""
    if event.fanout is None:
        return range(event.spec.rank, event.spec.rank + 1)
    return range(event.fanout.lo, event.fanout.hi)
