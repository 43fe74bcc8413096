"""A repeated message is printed once, then summarized with a count (a flood of refused connections)."""

from __future__ import annotations

import io
import time

from fmpi.util.notices import RepeatedNotice


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_flood_is_one_line_then_one_summary_per_period():
    out, clock = io.StringIO(), Clock()
    notice = RepeatedNotice("fmpi: rank 0: refused a connection", every=10.0, stream=out, clock=clock)
    for i in range(300):
        notice.say(f"bad hello (from 10.0.0.{i % 250}:{1000 + i})")
        clock.now += 0.01  # 300 within 3 s
    assert out.getvalue().splitlines() == ["fmpi: rank 0: refused a connection: bad hello (from 10.0.0.0:1000)"]
    clock.now += 10.0
    notice.say("bad hello (from 10.0.0.9:9)")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[1] == ("fmpi: rank 0: refused a connection: bad hello (from 10.0.0.9:9) "
                        "(and 299 more since the last report, the first: bad hello (from 10.0.0.1:1001))")


def test_rare_messages_are_each_printed_whole():
    out, clock = io.StringIO(), Clock()
    notice = RepeatedNotice("x", every=10.0, stream=out, clock=clock)
    for i in range(3):
        notice.say(f"case {i}")
        clock.now += 11.0
    assert out.getvalue().splitlines() == ["x: case 0", "x: case 1", "x: case 2"]


def test_a_flood_that_stops_is_summarized_when_its_period_ends():
    """No later message is needed for the count to show (a short flood left it held for good)."""
    out = io.StringIO()
    notice = RepeatedNotice("fmpi: rank 0: refused a connection", every=0.3, stream=out)
    for i in range(50):
        notice.say(f"bad hello #{i}")
    assert out.getvalue().splitlines() == ["fmpi: rank 0: refused a connection: bad hello #0"]
    deadline = time.monotonic() + 10
    while len(out.getvalue().splitlines()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert out.getvalue().splitlines()[1:] == [
        "fmpi: rank 0: refused a connection: 49 more like it since the last report, the first: bad hello #1"]
    time.sleep(0.5)
    assert len(out.getvalue().splitlines()) == 2, "summarized once"


def test_flush_prints_what_is_held_at_once():
    out, clock = io.StringIO(), Clock()
    notice = RepeatedNotice("x", every=10.0, stream=out, clock=clock)
    notice.say("a")
    notice.say("b")
    notice.say("c")
    notice.flush()
    notice.flush()  # nothing more held
    assert out.getvalue().splitlines() == ["x: a", "x: 2 more like it since the last report, the first: b"]
