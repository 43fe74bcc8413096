"""retry_until: tries again only what may pass, pauses between tries, and gives up at its deadline."""

from __future__ import annotations

import time

import pytest

from fmpi.util.retry import retry_until


class NotYet(Exception):
    pass


def test_a_passing_failure_is_tried_again_until_it_works():
    calls, pauses = [], []

    def attempt():
        calls.append(1)
        if len(calls) < 4:
            raise NotYet
        return "up"

    assert retry_until(attempt, time.monotonic() + 60, 0.25, lambda e: isinstance(e, NotYet), pauses.append) == "up"
    assert len(calls) == 4 and pauses == [0.25, 0.25, 0.25]


def test_any_other_failure_is_raised_at_once():
    calls = []

    def attempt():
        calls.append(1)
        raise KeyError("refused")

    with pytest.raises(KeyError):
        retry_until(attempt, time.monotonic() + 60, 0.01, lambda e: isinstance(e, NotYet))
    assert len(calls) == 1


def test_the_last_failure_is_raised_once_the_deadline_has_passed():
    start = time.monotonic()
    calls = []

    def attempt():
        calls.append(1)
        raise NotYet(len(calls))

    with pytest.raises(NotYet) as info:
        retry_until(attempt, start + 0.3, 0.05, lambda e: isinstance(e, NotYet))
    took = time.monotonic() - start
    assert 0.3 <= took < 2.0 and info.value.args == (len(calls),) and 3 <= len(calls) <= 8
