"""Fixtures of the relay protocol tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fmpi.rendezvous.relay_connection import RelayConnection


@pytest.fixture
def conns() -> Iterator[list[RelayConnection]]:
    """Connections a test opens (a job lives as long as its launcher's): all closed after it."""
    opened: list[RelayConnection] = []
    yield opened
    for c in opened:
        c.close()
