"""The progress thread: one epoll loop over links, the listener, the relay and a wake-up pipe.

It never polls: it sleeps until a socket is ready, a timer is due, or another
thread queues work with ``call_soon`` (which writes one byte to the pipe).
Registrations change only on this thread; other threads ask for that
through ``call_soon``.

The one exception is ``pause_read``/``resume_read``, which any thread may
call: a thread that blocks waiting for a message reads the link itself
(``waiting.py``, "the waiting thread reads"), and while it does the progress
thread must not be woken for that socket's data, or every message would
wake two threads and hand the GIL back and forth. ``epoll_ctl`` is
thread-safe in the kernel; ``_ctl_lock`` keeps our record of each socket's
interest consistent with it.
"""

from __future__ import annotations

import heapq
import itertools
import os
import select
import sys
import threading
import time
from typing import Any, Callable

READ = 1  # selectors.EVENT_READ, kept as the public vocabulary
WRITE = 2  # selectors.EVENT_WRITE

_EPOLL_READ = select.EPOLLIN | select.EPOLLRDHUP
_READABLE = ~select.EPOLLOUT  # anything but OUT (IN, HUP, ERR, RDHUP) is worth a read
_WRITABLE = ~(select.EPOLLIN | select.EPOLLRDHUP)  # anything but IN (OUT, HUP, ERR) is worth a write


class _Registration:
    __slots__ = ("fileobj", "events", "callback", "paused")

    def __init__(self, fileobj: Any, events: int, callback: Callable[[int], None]) -> None:
        self.fileobj = fileobj
        self.events = events
        self.callback = callback
        self.paused = 0  # threads reading this socket themselves

    def epoll_mask(self) -> int:
        mask = 0
        if self.events & READ and not self.paused:
            mask |= _EPOLL_READ
        if self.events & WRITE:
            mask |= select.EPOLLOUT
        return mask


def _fd(fileobj: Any) -> int:
    return fileobj if isinstance(fileobj, int) else fileobj.fileno()


class ProgressLoop:
    def __init__(self, name: str) -> None:
        self._epoll = select.epoll()
        self._regs: dict[int, _Registration] = {}
        self._ctl_lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._todo: list[Callable[[], None]] = []
        self._todo_lock = threading.Lock()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_ids = itertools.count()
        self._stopping = False
        self.stopped = False
        self.on_stop: Callable[[], None] | None = None  # runs on the loop thread as it ends
        self.register(self._wake_r, READ, self._on_wake)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ any thread
    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the progress thread (soon, in order). Callable with any lock held."""
        with self._todo_lock:
            if self.stopped:
                return
            self._todo.append(fn)
            try:
                os.write(self._wake_w, b"x")
            except BlockingIOError:
                pass  # the pipe is full: a wake-up is pending anyway

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        if self.in_loop():
            heapq.heappush(self._timers, (time.monotonic() + delay, next(self._timer_ids), fn))
        else:
            self.call_soon(lambda: self.call_later(delay, fn))

    def in_loop(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self, timeout: float = 5.0) -> None:
        if self._stopping or self.stopped:
            return
        self.call_soon(self._set_stopping)
        if not self.in_loop():
            self._thread.join(timeout)

    def pause_read(self, fileobj: Any) -> bool:
        """Stop waking the progress thread for data on `fileobj` (the caller reads it). False if not registered."""
        return self._change_pause(fileobj, +1)

    def resume_read(self, fileobj: Any) -> None:
        """Undo one ``pause_read``; data that arrived meanwhile wakes the progress thread at once."""
        self._change_pause(fileobj, -1)

    def _change_pause(self, fileobj: Any, delta: int) -> bool:
        with self._ctl_lock:
            try:
                reg = self._regs.get(_fd(fileobj))
            except (OSError, ValueError):
                return False  # closed
            if reg is None or reg.fileobj is not fileobj:
                return False
            reg.paused += delta
            self._apply(reg)
            return True

    # --------------------------------------------------------- loop thread only
    def register(self, fileobj: Any, events: int, callback: Callable[[int], None]) -> None:
        reg = _Registration(fileobj, events, callback)
        with self._ctl_lock:
            fd = _fd(fileobj)
            self._epoll.register(fd, reg.epoll_mask())
            self._regs[fd] = reg

    def set_events(self, fileobj: Any, events: int) -> None:
        with self._ctl_lock:
            try:
                reg = self._regs.get(_fd(fileobj))
            except (OSError, ValueError):
                return
            if reg is None or reg.fileobj is not fileobj or reg.events == events:
                return  # not registered (yet, or any more)
            reg.events = events
            self._apply(reg)

    def unregister(self, fileobj: Any) -> None:
        with self._ctl_lock:
            try:
                fd = _fd(fileobj)
            except (OSError, ValueError):
                fd = -1
            if fd < 0:
                # Closed already (a closed socket's fileno() is -1): find it by identity;
                # the kernel dropped it from epoll on close.
                fd = next((k for k, r in self._regs.items() if r.fileobj is fileobj), -1)
            reg = self._regs.get(fd)
            if reg is None or reg.fileobj is not fileobj:
                return
            del self._regs[fd]
            try:
                self._epoll.unregister(fd)
            except (OSError, ValueError):
                pass

    def registered(self) -> list[Any]:
        with self._ctl_lock:
            return [r.fileobj for r in self._regs.values() if r.fileobj is not self._wake_r]

    def _apply(self, reg: _Registration) -> None:
        try:
            self._epoll.modify(_fd(reg.fileobj), reg.epoll_mask())
        except (OSError, ValueError):
            pass  # closed under us: unregister follows

    def _run(self) -> None:
        try:
            while not self._stopping:
                timeout = -1.0
                if self._timers:
                    timeout = max(0.0, self._timers[0][0] - time.monotonic())
                try:
                    ready = self._epoll.poll(timeout)
                except InterruptedError:
                    continue
                for fd, event in ready:
                    reg = self._regs.get(fd)
                    if reg is None:
                        continue  # unregistered by an earlier callback of this round
                    mask = ((READ if event & _READABLE else 0) | (WRITE if event & _WRITABLE else 0)) & reg.events
                    if not mask:
                        continue
                    try:
                        reg.callback(mask)
                    except Exception as exc:  # never let one bad event kill progress
                        print(f"fmpi: progress error: {exc!r}", file=sys.stderr)
                now = time.monotonic()
                while self._timers and self._timers[0][0] <= now:
                    _, _, fn = heapq.heappop(self._timers)
                    try:
                        fn()
                    except Exception as exc:
                        print(f"fmpi: progress error in a timer: {exc!r}", file=sys.stderr)
        finally:
            with self._todo_lock:
                self.stopped = True  # (before on_stop: threads it wakes must see it)
                self._todo.clear()
            if self.on_stop is not None:
                try:
                    self.on_stop()
                except Exception as exc:
                    print(f"fmpi: progress error while stopping: {exc!r}", file=sys.stderr)
            with self._ctl_lock:
                self._regs.clear()
                self._epoll.close()
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _on_wake(self, _mask: int) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        with self._todo_lock:
            todo, self._todo = self._todo, []
        for fn in todo:
            try:
                fn()
            except Exception as exc:
                print(f"fmpi: progress error in queued work: {exc!r}", file=sys.stderr)

    def _set_stopping(self) -> None:
        self._stopping = True
