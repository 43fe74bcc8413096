"""Shared-memory lanes never join ranks in different network namespaces (as ranks on different machines).

Ranks behind the NAT lab's gateways share this host's /dev/shm, yet their
links must stay on TCP like links between Lambda functions: their host keys
differ because their network namespaces do.
"""

from __future__ import annotations

import sys

from natlab.topology import NatLab

from fmpi.transport.links.shm_lane import NO_KEY, host_key

KEY = "from fmpi.transport.links.shm_lane import host_key; print(host_key().hex())"


def test_another_network_namespace_has_another_host_key(natlab_required):
    with NatLab() as lab:
        inside = lab.run(lab.RELAY, [sys.executable, "-c", KEY], check=True).stdout.strip()
    assert len(inside) == 32 and inside != NO_KEY.hex()
    assert inside != host_key().hex()
