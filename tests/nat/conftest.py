"""Fixtures for job-level NAT tests: real fmpirun jobs whose ranks each sit behind their own NAT.

* ``natlab_required``: skips (with the reason) where network namespaces,
  root or iptables are missing.
* ``nat_job``: builds the module's lab from ``LAB_HOSTS`` (see
  tests/natlab/topology.py), starts ``fmpi-relay`` on the lab's public side
  and returns a ``LabJobs`` runner (labjob.py). Everything is killed and
  the namespaces are deleted afterwards, also when a test fails.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for path in (HERE.parent, HERE):  # natlab.topology and labjob, whatever the import mode
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from labjob import LabJobs  # noqa: E402
from natlab.topology import NatLab, cleanup_stale, natlab_available  # noqa: E402


@pytest.fixture(scope="session")
def natlab_required() -> None:
    ok, reason = natlab_available()
    if not ok:
        pytest.skip(f"NAT lab unavailable: {reason}")


@pytest.fixture(scope="module")
def nat_job(request: pytest.FixtureRequest, natlab_required: None) -> Iterator[LabJobs]:
    cleanup_stale()  # leftovers of killed earlier runs (dead owner pids only)
    with NatLab() as lab:
        for name, kind in request.module.LAB_HOSTS.items():
            if kind.startswith("lan:"):
                lab.add_host(name, gateway=kind[4:])
            else:
                lab.add_host(name, kind)
        jobs = LabJobs(lab)
        try:
            yield jobs
        finally:
            jobs.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.natlab)
