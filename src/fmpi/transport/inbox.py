"""Inboxes: the messages of one context, handed to a function by whichever thread reads them.

An RMA window's target (``api/rma_target``) answers requests no receive of the program asks for. Handing
each one to a thread of its own cost a thread switch per request (the reader woke the service thread,
which then needed the GIL). A context with an inbox instead has its messages served where they are
read — by the progress thread, by a program thread that reads its links while it waits (``waiting.py``),
or by the sender of a message to itself — so a request is applied, and answered, on the spot.

Order: messages go into the inbox's queue under the engine lock, in the order the matcher would have
matched them (one peer's frames are read in order), and one thread at a time serves the queue from its
head, outside the engine lock. A large message comes in two steps (its announcement, then, after our CTS,
its payload): its place in the queue is kept by a receive that completes when the payload is in; the queue
waits for it there. A new inbox takes over the context's unexpected messages, in order.

An inbox starts *held*: it queues and serves nothing until ``release`` (a window opens its inbox when its
rank's program next calls into the engine: ``next_call.py``).

The function must not block: it runs inside the engine's readers (answers go out with ``Engine.isend``,
never waited for).
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections import deque
from typing import Callable

from .core import Core
from .requests import Arrived, RecvOp
from .sending import Sender

# serve(source world rank, tag, payload)
Serve = Callable[[int, int, "bytearray | memoryview"], None]


class InboxRecv(RecvOp):
    """The queue's place of a message whose payload is still coming (or was taken unexpected)."""

    __slots__ = ("inbox",)


class Inbox:
    """One context's messages, served in order (see the module docstring)."""

    def __init__(self, context: int, serve: Serve, serving: Callable[[], object]) -> None:
        self.context = context
        self._serve = serve
        self._serving = serving  # context manager: engine calls made while serving are not the program's
        self._queue: deque[tuple[int, int, bytearray | memoryview | InboxRecv]] = deque()
        self._lock = threading.Lock()  # (taken after the engine lock, never before it)
        self._running = False  # a thread serves the queue
        self._held = True

    def put(self, source: int, tag: int, payload: bytearray | memoryview | InboxRecv) -> None:
        """Queue a message (engine lock held: that fixes its order); the caller then calls ``run``."""
        with self._lock:
            self._queue.append((source, tag, payload))

    def release(self) -> None:
        self._held = False
        self.run()

    def run(self) -> None:
        """Serve the queue from its head (engine lock not held); if another thread is serving, it serves
        what this one queued too (it looks at the queue again under the same lock before it stops)."""
        with self._lock:
            if self._running or self._held:
                return
            self._running = True
        with self._serving():
            while True:
                with self._lock:
                    head = self._queue[0] if self._queue and not self._held else None
                    if head is not None and isinstance(head[2], InboxRecv) and not head[2].done:
                        head = None  # (its payload is still coming: whoever delivers it runs the queue)
                    if head is None:
                        self._running = False
                        return
                    self._queue.popleft()
                source, tag, payload = head
                if isinstance(payload, InboxRecv):
                    if payload.error is not None:
                        continue  # (its sender failed before the payload came)
                    payload = payload.payload  # type: ignore[assignment]
                try:
                    self._serve(source, tag, payload)  # type: ignore[arg-type]
                except Exception:  # (a reader thread must survive; the origin learns nothing: print it)
                    print(f"fmpi: a request on context {self.context} failed:", file=sys.stderr)
                    traceback.print_exc()


class Inboxes:
    """The engine's inboxes, by context (``Core.inboxes``)."""

    def __init__(self, core: Core, sender: Sender, serving: Callable[[], object]) -> None:
        self._core = core
        self._sender = sender
        self._serving = serving

    def open(self, context: int, serve: Serve) -> Inbox:
        """An inbox for `context`, held; it takes the messages that arrived for it before."""
        inbox = Inbox(context, serve, self._serving)
        core = self._core
        taken: list[tuple[Arrived, int]] = []
        with core.lock:
            core.inboxes[context] = inbox
            for msg in core.matcher.take_all_unexpected(context):
                recv = InboxRecv(context, msg.source, msg.tag, None)
                recv.inbox = inbox
                taken.append((msg, core.take_arrived(recv, msg)))
                inbox.put(msg.source, msg.tag, recv)
        for msg, credit in taken:
            self._sender.took(msg, credit)
        return inbox

    def close(self, context: int) -> None:
        with self._core.lock:
            self._core.inboxes.pop(context, None)
