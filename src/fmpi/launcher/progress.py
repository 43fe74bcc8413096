"""What fmpirun says while a local job runs: a live status line on a terminal, readable lines with -v, else nothing.

The live line (``fmpirun: 64 ranks: 64 started, 40 joined, 2.1 s``, then
``..., all joined in 3.2 s, 120 links``) is redrawn in place on stderr as
events arrive and is wiped before the first line the ranks print, never to
come back: the program's own output is what the terminal is for. Plain ANSI
(carriage return, erase line) rather than a library's live display: the
ranks' output reaches the terminal as raw bytes on our file descriptors,
which a redrawing display would not know about.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

from . import closed_output
from .job import log
from ..wire.nat_kinds import NAT_KINDS, NONE, describe
from .link_table import describe_event

_ERASE = "\r\x1b[K"
_REDRAW_EVERY = 0.1  # seconds: a terminal need not be redrawn for each of 256 joins


class Progress:
    """The job's events as the user sees them (`verbose`: one line each; `live`: the status line)."""

    def __init__(self, size: int, verbose: bool, live: bool, stream: TextIO = sys.stderr) -> None:
        self._size = size
        self._verbose = verbose
        self._live = live and not verbose
        self._stream = stream
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._drawn_at = 0.0
        self._shown = False
        self._started = 0
        self._joined: set[int] = set()
        self._world: float | None = None
        self._links: set[tuple[int, int]] = set()
        if self._live:
            closed_output.before_write = self.stop

    @property
    def links_shown(self) -> set[tuple[int, int]]:
        """The rank pairs whose link -v has shown as it formed."""
        with self._lock:
            return set(self._links) if self._verbose else set()

    def rank_started(self) -> None:
        with self._lock:
            self._started += 1
            self._draw(final=self._started == self._size)

    def on_event(self, kind: str, body: dict[str, Any]) -> None:
        with self._lock:
            line = self._record(kind, body)
            if self._verbose and line:
                log(line)
            self._draw(final=kind == "world")

    def _record(self, kind: str, body: dict[str, Any]) -> str | None:
        """Count the event; its -v line (None: not worth one)."""
        rank = body.get("rank")
        if kind == "joined":
            self._joined.add(rank)
            return f"rank {rank} joined ({len(self._joined)} of {self._size})" + _nat(body.get("nat"))
        if kind == "world":
            self._world = time.monotonic() - self._t0
            return f"all {self._size} ranks joined; the world formed in {body.get('seconds', self._world):.2f} s"
        if kind == "link":
            pair = (min(rank, body["peer"]), max(rank, body["peer"]))
            if body.get("event") != "failover" and pair in self._links:
                return None  # (each link once: both ends may report it)
            self._links.add(pair)
            return describe_event(body)
        if kind == "lost":
            return f"rank {rank} lost" + _lost_why(body)
        if kind == "away":
            return f"rank {rank} lost its connection to the relay; waiting for it to reconnect"
        if kind == "rejoined":
            if body.get("reconnected"):
                away = body.get("away")
                return f"rank {rank} reconnected to the relay" + (f" after {away:.3f} s" if _number(away) else "")
            return f"rank {rank} rejoined the restarted relay"
        if kind == "finished":
            code = body.get("code")
            return f"rank {rank} finished" + (f" with status {code}" if code else "")
        return None

    def _draw(self, final: bool) -> None:
        now = time.monotonic()
        if not self._live or (not final and now - self._drawn_at < _REDRAW_EVERY):
            return
        self._drawn_at = now
        text = f"fmpirun: {self._size} ranks: {self._started} started, {len(self._joined)} joined"
        if self._world is not None:
            text = f"fmpirun: {self._size} ranks: all joined in {self._world:.1f} s"
            text += f", {len(self._links)} links" if self._links else ""
        else:
            text += f", {now - self._t0:.1f} s"
        self._write(_ERASE + text)
        self._shown = True

    def stop(self) -> None:
        """Wipe the live line for good (the ranks are about to print, or the job is over)."""
        with self._lock:
            if self._shown:
                self._write(_ERASE)
                self._shown = False
            self._live = False
        if closed_output.before_write == self.stop:
            closed_output.before_write = None

    def _write(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()


def _lost_why(body: dict[str, Any]) -> str:
    """Why the relay counts a rank as lost, when it says: silent, or away without reconnecting."""
    if _number(body.get("silent")):
        return f" (silent for {body['silent']:g} s)"
    if _number(body.get("away")):
        return f" (its connection to the relay broke and it did not reconnect within {body['away']:g} s)"
    return ""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _nat(nat: Any) -> str:
    """", behind a cone NAT" (and why the kind is unknown, when it is): what a rank found out about its NAT
    (nothing for a rank not behind one: every rank of a local job)."""
    if not isinstance(nat, dict) or nat.get("kind") not in NAT_KINDS or nat["kind"] == NONE:
        return ""
    note = nat.get("note")
    return f", {describe(nat['kind'])}" + (f": {note}" if isinstance(note, str) and note else "")
