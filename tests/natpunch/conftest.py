"""Fixtures for the NAT lab and hole-punching tests.

* ``lab``: a module-scoped :class:`natlab.topology.NatLab` built from the
  test module's ``LAB_HOSTS`` ({name: nat kind or "lan:<other host>"}), with
  the observer (``nettool.py observe``) running in the relay namespace on
  ``OBSERVER_PORTS``.  Always torn down (processes killed, namespaces
  deleted), also when tests fail.
* ``agents``: spawns ``punch_agent.py`` ranks in lab hosts and kills them
  after the test.

Tests skip (with the reason from ``natlab_available()``) only when this
machine cannot build the lab (not root, no ``ip netns``, no iptables).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

# helpers live next to this file; make them importable whatever pytest's
# import mode is
sys.path.insert(0, str(Path(__file__).resolve().parent))

from labtools import NETTOOL, OBSERVER_PORTS, Agents, spawn_json  # noqa: E402
from natlab.topology import NatLab, cleanup_stale, natlab_available  # noqa: E402


@pytest.fixture(scope="session")
def natlab_required() -> None:
    ok, reason = natlab_available()
    if not ok:
        pytest.skip(f"NAT lab unavailable: {reason}")


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest, natlab_required: None) -> Iterator[NatLab]:
    hosts: Mapping[str, str] = request.module.LAB_HOSTS
    cleanup_stale()  # leftovers of killed earlier runs (dead owner pids only)
    with NatLab() as lab:
        for name, kind in hosts.items():
            if kind.startswith("lan:"):
                lab.add_host(name, gateway=kind[4:])
            else:
                lab.add_host(name, kind)
        args = [NETTOOL, "observe"]
        for port in OBSERVER_PORTS:
            args += ["--port", str(port)]
        observer = spawn_json(lab, lab.RELAY, args, "observer")
        assert observer.read(10)["event"] == "ready"
        yield lab
        # NatLab.__exit__ kills the observer and every other lab process


@pytest.fixture
def agents(lab: NatLab) -> Iterator[Agents]:
    group = Agents(lab)
    try:
        yield group
    finally:
        group.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests that build a lab with the project's ``natlab`` marker
    (``-m 'not natlab'`` deselects them); the loopback tests stay unmarked."""
    here = Path(__file__).resolve().parent
    for item in items:
        if "lab" in getattr(item, "fixturenames", ()) and here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.natlab)
