"""MPI name publishing, one contract over the three backends: memory://, a real fmpi-relay, a real redis-server.

Only ``rendezvous.names`` and ``rendezvous.job_control`` are spoken, so a
backend whose name service drifts from the others (an error code, the
lifetime of a name) fails here by name.
"""

from __future__ import annotations

import time
import uuid

import pytest
from tests_support import RelayProcess

from fmpi import rendezvous
from fmpi.rendezvous.relay_connection import RelayError
from fmpi.rank.spawn import Quiet  # (a job's events nobody needs)
from fmpi.wire.names import DEFAULT_MAX_PER_JOB, MAX_NAME

TOKEN = "m" * 24



@pytest.fixture(scope="module")
def names_relay_url():
    relay = RelayProcess()
    yield relay.url
    relay.stop()


@pytest.fixture(params=["memory", "fmpi-relay", "redis"])
def url(request):
    if request.param == "memory":
        return f"memory://names-{uuid.uuid4().hex}"
    if request.param == "fmpi-relay":
        return request.getfixturevalue("names_relay_url")
    return request.getfixturevalue("redis_server")[0]


@pytest.fixture
def jobs(url):
    """Factory: a job created at `url` (ended after the test); returns (its JobControl, its name service)."""
    made = []

    def make():
        job = "names-" + uuid.uuid4().hex[:12]
        control = rendezvous.job_control(url)
        control.create(job, TOKEN, 1, 60.0, Quiet())
        made.append(control)
        return control, rendezvous.names(url, job, TOKEN)

    yield make
    for control in made:
        control.end()


def code(call) -> str:
    with pytest.raises(RelayError) as caught:
        call()
    return caught.value.code


def fresh() -> str:
    return "svc-" + uuid.uuid4().hex


def test_publish_lookup_unpublish_across_jobs(jobs):
    (_, server), (_, client) = jobs(), jobs()
    name = fresh()
    assert code(lambda: client.lookup(name)) == "name_unknown"
    server.publish(name, "fmpi-port:1:s")
    assert client.lookup(name) == "fmpi-port:1:s"
    assert code(lambda: client.publish(name, "fmpi-port:2:t")) == "name_taken"
    assert code(lambda: server.publish(name, "fmpi-port:1:s")) == "name_taken"
    assert code(lambda: client.unpublish(name, "fmpi-port:2:t")) == "name_port"
    assert client.lookup(name) == "fmpi-port:1:s"
    server.unpublish(name, "fmpi-port:1:s")
    assert code(lambda: server.unpublish(name, "fmpi-port:1:s")) == "name_unknown"
    assert code(lambda: client.lookup(name)) == "name_unknown"
    client.publish(name, "fmpi-port:2:t")  # (free again, for any job)
    assert server.lookup(name) == "fmpi-port:2:t"


def test_a_name_ends_with_the_job_that_published_it(jobs):
    (control, server), (_, client) = jobs(), jobs()
    mine, theirs = fresh(), fresh()
    server.publish(mine, "p")
    client.publish(theirs, "q")
    control.end()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            client.lookup(mine)
        except RelayError as exc:
            assert exc.code == "name_unknown"
            break
        time.sleep(0.05)
    else:
        pytest.fail("the ended job's name outlived it")
    assert client.lookup(theirs) == "q"
    assert code(lambda: server.publish(fresh(), "p")) == "unknown_job"  # (an ended job publishes nothing)


def test_names_and_ports_are_bounded(jobs):
    _, service = jobs()
    assert code(lambda: service.publish("", "p")) == "bad_name"
    assert code(lambda: service.publish("x" * (MAX_NAME + 1), "p")) == "bad_name"
    assert code(lambda: service.publish(fresh(), "")) == "bad_name"
    assert code(lambda: service.lookup("")) == "bad_name"
    for i in range(DEFAULT_MAX_PER_JOB):
        service.publish(f"bounded-{i}-" + uuid.uuid4().hex[:6], "p")
    assert code(lambda: service.publish(fresh(), "p")) == "names_full"


def test_redis_leaves_no_name_behind(redis_server):
    url, client = redis_server
    control = rendezvous.job_control(url)
    control.create("names-redis-end", TOKEN, 1, 60.0, Quiet())
    names = rendezvous.names(url, "names-redis-end", TOKEN)
    names.publish("redis-a", "p")
    names.publish("redis-b", "p")
    assert client.ttl("fmpi:name:redis-a") > 0  # (a launcher that vanished leaves them to expire)
    names.unpublish("redis-b", "p")
    control.end()
    assert not list(client.scan_iter(match="fmpi:name:redis-*")) and not client.exists("fmpi:{names-redis-end}:names")
    client.set("fmpi:name:garbage", b"{[[[")  # (anyone with the URL may write there)
    other = rendezvous.job_control(url)
    other.create("names-redis-2", TOKEN, 1, 60.0, Quiet())
    try:
        assert code(lambda: rendezvous.names(url, "names-redis-2", TOKEN).lookup("garbage")) == "name_unknown"
        assert code(lambda: rendezvous.names(url, "names-redis-2", TOKEN).unpublish("garbage", "p")) == "name_port"
    finally:
        other.end()
        client.delete("fmpi:name:garbage")


def test_names_on_a_redis_cluster(redis_cluster):
    """A name is a key of its own (any slot), the job's list of names another: publish, look up from another job,
    withdraw, and a job's end drops what it left, through the spare node that owns no slot."""
    url = redis_cluster.url(redis_cluster.spare)
    server, client = rendezvous.job_control(url), rendezvous.job_control(url)
    server.create("names-cluster-a", TOKEN, 1, 60.0, Quiet())
    client.create("names-cluster-b", TOKEN, 1, 60.0, Quiet())
    try:
        mine = rendezvous.names(url, "names-cluster-a", TOKEN)
        theirs = rendezvous.names(url, "names-cluster-b", TOKEN)
        names = [f"cluster-{i}" for i in range(8)]  # (spread over the masters' slots)
        for name in names:
            mine.publish(name, f"port-{name}")
        assert len({redis_cluster.owner(f"fmpi:name:{n}") for n in names}) > 1
        assert [theirs.lookup(n) for n in names] == [f"port-{n}" for n in names]
        assert code(lambda: theirs.publish(names[0], "p")) == "name_taken"
        assert code(lambda: theirs.unpublish(names[0], "p")) == "name_port"
        theirs.unpublish(names[0], f"port-{names[0]}")
        server.end()
        assert all(code(lambda n=n: theirs.lookup(n)) == "name_unknown" for n in names)
    finally:
        server.end()
        client.end()
