"""The world a rank receives is compact: its bytes do not grow with the job (issue 28), and a rank looks up
only the peers it links to, many in one LOOKUP.

Before, WORLD listed every rank's endpoints to every rank: O(N) bytes each,
O(N^2) for the relay in all (93 KB per rank at 1,024 ranks).
"""

from __future__ import annotations

import pytest

from fmpi.relay_server.server import RelayThread
from fmpi.rendezvous.relay_connection import RelayConnection, RelayError, register
from fmpi.wire.relay_protocol import HEADER_SIZE, MAX_LOOKUP, Kind

TOKEN = "w" * 24


@pytest.fixture
def relay():
    r = RelayThread("127.0.0.1", 0)
    yield r
    r.stop()


def world_job(relay, job: str, size: int) -> tuple[RelayConnection, list[RelayConnection]]:
    url = "tcp://{}:{}".format(*relay.address)
    watcher = RelayConnection(url)
    watcher.send(Kind.CREATE, {"job": job, "token": TOKEN, "size": size, "fill_timeout": 30})
    watcher.expect(Kind.CREATED, 5)
    members = []
    for r in range(size):
        conn = RelayConnection(url)
        register(conn, job, TOKEN, r, f"i{r}", [("10.1.0.1", 2000 + r)], 5)
        members.append(conn)
    return watcher, members


def world_bytes(conn: RelayConnection) -> int:
    """The WORLD frame's size on the wire (header and body), as the rank receives it."""
    kind, body = conn.next_frame()
    while kind is Kind.HEARTBEAT:
        kind, body = conn.next_frame()
    assert kind is Kind.WORLD
    return HEADER_SIZE + len(body)


def test_the_world_frame_does_not_grow_with_the_job(relay):
    sizes = {}
    for n in (4, 256):
        watcher, members = world_job(relay, f"compact-{n}", n)
        sizes[n] = {world_bytes(m) for m in members}
        for conn in (watcher, *members):
            conn.close()
    assert sizes[4] == {HEADER_SIZE + len('{"size":4}')}
    assert sizes[256] == {HEADER_SIZE + len('{"size":256}')}  # (it listed every peer: ~23 KB per rank)


def test_one_lookup_answers_many_peers_and_names_those_it_cannot(relay):
    watcher, members = world_job(relay, "compact-lookup", 64)
    asker = members[5]
    world_bytes(asker)
    asker.send(Kind.LOOKUP, {"ranks": [1, 2, 4, 8, 16, 32, 64, 2]})
    answer = asker.expect(Kind.PEERS, 5)
    assert [(p["rank"], p["endpoints"]) for p in answer["peers"]] == [
        (r, [["10.1.0.1", 2000 + r]]) for r in (1, 2, 4, 8, 16, 32)
    ]
    assert all(p["observed"][0] == "127.0.0.1" for p in answer["peers"])
    assert answer["missing"] == [{"rank": 64, "reason": "rank 64 is outside job 'compact-lookup' of 64 ranks"}]
    for conn in (watcher, *members):
        conn.close()


def test_a_lookup_before_the_world_or_too_long_is_refused(relay):
    watcher, members = world_job(relay, "compact-early", 3)
    early = RelayConnection("tcp://{}:{}".format(*relay.address))
    watcher2 = RelayConnection(early.url)
    watcher2.send(Kind.CREATE, {"job": "compact-early-2", "token": TOKEN, "size": 2, "fill_timeout": 30})
    watcher2.expect(Kind.CREATED, 5)
    register(early, "compact-early-2", TOKEN, 0, "e", [("10.1.0.1", 3000)], 5)
    early.send(Kind.LOOKUP, {"ranks": [1]})
    with pytest.raises(RelayError, match="LOOKUP is for members of a job whose world is published"):
        early.recv(5)
    world_bytes(members[0])
    members[0].send(Kind.LOOKUP, {"ranks": list(range(MAX_LOOKUP + 1))})
    with pytest.raises(RelayError, match=f"at most {MAX_LOOKUP} ranks"):
        members[0].recv(5)
    for conn in (watcher, watcher2, early, *members):
        conn.close()
