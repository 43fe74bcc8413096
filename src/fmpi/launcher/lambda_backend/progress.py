"""What a Lambda launch shows while it works: a live display on a terminal, plain lines otherwise; and the ranks' output.

A first deployment takes a minute (dependencies, zip, upload, function
update, cold starts); silence for that long looks like a hang. So:

* on a terminal (stderr is a tty, and ``rich`` is installed): a live
  status line with a spinner, the step under way and, once ranks are
  invoked, ``invoked / joined / linked`` counts; each finished step stays
  as one line above it, and the ranks' output scrolls above it too
  (invocations are counted against the invocations the launch makes, which
  is fewer than the ranks with ``--ranks-per-function``; ranks against N);
* otherwise (a pipe, a CI log): one ``fmpirun: ...`` line per finished step
  and per milestone (all ranks invoked, joined, linked).

``Printer`` writes the ranks' output a complete line at a time, as the
local backend prints a rank's pipes.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from ..job import log

COUNTS = ("invoked", "joined", "linked")


class Display:
    """Steps and counts on stderr (see the module docstring); thread-safe."""

    def __init__(self, size: int, verbose: bool, live: bool | None = None, invocations: int | None = None) -> None:
        self.size = size
        # What each count reaches when the launch is whole: "invoked" counts invocations, the others ranks.
        self.targets = {"invoked": size if invocations is None else invocations, "joined": size, "linked": size}
        self.verbose = verbose
        self.counts = dict.fromkeys(COUNTS, 0)
        self.reported: set[str] = set()
        self.lock = threading.RLock()
        self.activity_text = ""
        self._live: Any = None
        if live if live is not None else sys.stderr.isatty():
            self._live = _start_live(self._render)

    # ------------------------------------------------------------ steps
    def step(self, text: str) -> None:
        """A finished step: one line that stays."""
        with self.lock:
            if self._live is not None:
                self._live.console.print(f"[green]✓[/green] {_escape(text)}", highlight=False)
            else:
                log(text)

    def activity(self, text: str) -> None:
        """What is under way now (the live line; a log line with --verbose)."""
        with self.lock:
            self.activity_text = text
            if self._live is None and self.verbose:
                log(text)

    def platform_bound(self, cause: str, text: str) -> None:
        """The platform, not fmpi, holds the launch back now (its scaling rule, its throttling): on the live line,
        and said once per `cause` as a warning."""
        with self.lock:
            self.activity_text = text
            first = cause not in self.reported
            self.reported.add(cause)
        if first:
            self.warn(text)

    def note(self, text: str) -> None:
        """A detail shown only with --verbose."""
        if self.verbose:
            self.step(text)

    def warn(self, text: str) -> None:
        with self.lock:
            if self._live is not None:
                self._live.console.print(f"[yellow]warning:[/yellow] {_escape(text)}", highlight=False)
            else:
                log(f"warning: {text}")

    # ------------------------------------------------------------ counts
    def update(self, **counts: int) -> None:
        with self.lock:
            self.counts.update(counts)
            if self._live is not None:
                return  # the live line reads them on its next refresh
            for name in COUNTS:
                if self.counts[name] >= self.targets[name] and name not in self.reported:
                    self.reported.add(name)
                    log(f"{name} {self.counts[name]}/{self.targets[name]}")

    def _render(self) -> Any:
        from rich.spinner import Spinner

        text = self.activity_text
        if any(self.counts.values()):
            text = (text + " · " if text else "") + " · ".join(f"{k} {v}/{self.targets[k]}" for k, v in self.counts.items())
        return Spinner("dots", text=text or "working")

    # ------------------------------------------------------------ output
    def write_output(self, sink: Any, text: str) -> None:
        """Rank output: above the live line when it shares the terminal, else straight to `sink`."""
        with self.lock:
            if self._live is not None and sink.isatty():
                from rich.text import Text

                self._live.console.print(Text(text.removesuffix("\n")), soft_wrap=True, highlight=False)
                return
            sink.write(text)
            sink.flush()

    def close(self) -> None:
        with self.lock:
            if self._live is not None:
                self._live.stop()
                self._live = None


def _start_live(render) -> Any:
    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError:  # plain lines, as on a pipe
        return None

    class _Renderable:
        def __rich__(self) -> Any:
            return render()

    live = Live(_Renderable(), console=Console(file=sys.stderr), transient=True, refresh_per_second=8,
                redirect_stdout=False, redirect_stderr=False)
    live.start()
    return live


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


class Printer:
    """Rank output to our stdout/stderr, a complete line at a time (as the local backend prints it).

    Ranks send a partial line when they pause mid-line; it is held until its
    newline arrives (or the job ends), so that lines of different ranks never
    interleave. With --tag-output every line starts with "[rank] ".
    """

    def __init__(self, tag_output: bool, display: Display) -> None:
        self.tag = tag_output
        self.display = display
        self.lock = threading.Lock()
        self.partial: dict[tuple[int, str], str] = {}

    def write(self, rank: int, stream: str, data: str) -> None:
        with self.lock:
            key = (rank, stream)
            data = self.partial.pop(key, "") + data
            cut = data.rfind("\n") + 1
            if cut < len(data):
                self.partial[key] = data[cut:]
            if cut:
                self._emit(rank, stream, data[:cut])

    def flush(self) -> None:
        with self.lock:
            for (rank, stream), rest in sorted(self.partial.items()):
                self._emit(rank, stream, rest + "\n")
            self.partial.clear()

    def _emit(self, rank: int, stream: str, lines: str) -> None:
        if self.tag:
            lines = "".join(f"[{rank}] {line}" for line in lines.splitlines(keepends=True))
        self.display.write_output(sys.stderr if stream == "stderr" else sys.stdout, lines)
