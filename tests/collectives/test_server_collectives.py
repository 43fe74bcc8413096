"""Server-side collectives in whole jobs: ``fmpirun --channel relay`` on fmpi-relay (DSO objects, one or two
relays) and on Redis (scripts), against the same programs on direct links.

Each relayed job must (a) give exactly the results of the direct run (the
diff_* programs print theirs; the check_* programs check every case
themselves), (b) have really used the server-side forms — every rank prints
its provider's call counts, and with Redis the server's EVALSHA count grows —
and (c) with Redis, leave no key behind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests_support import fmpirun_argv, verdict

TESTS = Path(__file__).resolve().parents[1]
PROGRAMS = TESTS / "collectives" / "programs"

_direct: dict[tuple[str, int], list[str]] = {}


def fmpirun(n: int, program: Path, *args: str, relay: str | None = None, channel: str | None = "relay", env=None, timeout=300):
    extra = [*(["--relay", relay] if relay else []), *(["--channel", channel] if channel else [])]
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        fmpirun_argv("-n", str(n), *extra, sys.executable, str(program), *args),
        capture_output=True, text=True, timeout=timeout, env=full_env, cwd=str(PROGRAMS),
    )


def lines_of(directory: Path) -> list[str]:
    return sorted(line for f in directory.glob("rank*.txt") for line in f.read_text().splitlines())


def diff_run(program: str, n: int, tmp_path: Path, label: str, **kw) -> list[str]:
    out = tmp_path / label
    out.mkdir()
    done = fmpirun(n, PROGRAMS / program, str(out), **kw)
    assert done.returncode == 0, f"{program} -n {n} {label}: exit {done.returncode}\n{done.stderr[-4000:]}"
    lines = lines_of(out)
    assert len(lines) >= 5 * n
    return lines


def direct(program: str, n: int, tmp_path: Path) -> list[str]:
    if (program, n) not in _direct:
        _direct[(program, n)] = diff_run(program, n, tmp_path, "direct", channel="direct")
    return _direct[(program, n)]


def server_calls(stdout: str, n: int) -> dict[int, dict[str, int]]:
    calls = {int(m.group(1)): json.loads(m.group(2)) for m in re.finditer(r"^SERVER (\d+) (.*)$", stdout, re.MULTILINE)}
    assert sorted(calls) == list(range(n)), stdout[-2000:]
    return calls


def evalsha_calls(client) -> int:
    return client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)


def fmpi_keys(client) -> list[bytes]:
    return list(client.scan_iter(match="fmpi:*", count=1000))


@pytest.fixture(params=["tcp", "redis"])
def relay(request, redis_server):
    """(kind, url, redis client or None): a standalone fmpi-relay, or the module's redis-server."""
    if request.param == "redis":
        url, client = redis_server
        return "redis", url, client
    return "tcp", request.getfixturevalue("relay_pair")[0].url, None


# ------------------------------------------------------------- whole jobs
@pytest.mark.parametrize("n", [2, 4])
def test_server_side_path_is_used_and_exact(relay, n):
    kind, url, client = relay
    before = evalsha_calls(client) if client is not None else 0
    done = fmpirun(n, PROGRAMS / "check_server_side.py", relay=url)
    verdict(done, f"check_server_side -n {n} on {kind}")
    calls = server_calls(done.stdout, n)
    for r, c in calls.items():
        assert c.get("allreduce", 0) >= 15 and c.get("barrier", 0) >= 2, f"rank {r} did not use the server: {c}"
    if client is not None:
        assert evalsha_calls(client) - before >= sum(c["allreduce"] + c["barrier"] for c in calls.values())
        assert fmpi_keys(client) == []


def test_environment_forces_point_to_point(relay):
    """FMPI_COLL_ALGO still wins over the channel: a relayed job on the point-to-point forms."""
    kind, url, client = relay
    env = {"FMPI_COLL_ALGO": "barrier:dissemination,allreduce:recursive_doubling"}
    done = fmpirun(2, PROGRAMS / "check_server_side.py", relay=url, env=env)
    verdict(done, f"forced point-to-point on {kind}")
    assert all(c == {} for c in server_calls(done.stdout, 2).values())


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("program", ["diff_uppercase.py", "diff_lowercase.py", "diff_comms.py"])
def test_same_results_as_direct_links(relay, program, n, tmp_path):
    kind, url, client = relay
    ref = direct(program, n, tmp_path)
    assert diff_run(program, n, tmp_path, kind, relay=url) == ref
    if client is not None:
        assert fmpi_keys(client) == []


@pytest.mark.parametrize("program", ["check_reductions.py", "check_movement.py", "check_nonblocking.py", "check_comms.py"])
def test_every_collective_checks_out(relay, program):
    kind, url, client = relay
    verdict(fmpirun(4, PROGRAMS / program, relay=url), f"{program} -n 4 on {kind}")
    if client is not None:
        assert fmpi_keys(client) == []


def test_eight_ranks_on_two_sharded_relays(relay_pair, tmp_path):
    """--relay tcp://a,b: rendezvous on a, objects sharded over both."""
    url = "tcp://" + ",".join("{}:{}".format(*r.address) for r in relay_pair)
    done = fmpirun(8, PROGRAMS / "check_server_side.py", relay=url)
    verdict(done, "check_server_side -n 8 on two relays")
    assert all(c.get("allreduce", 0) >= 15 for c in server_calls(done.stdout, 8).values())
    nodes = [json.loads(m.group(1)) for m in re.finditer(r"^NODES \d+ (.*)$", done.stdout, re.MULTILINE)]
    # A rank connects to a node when one of the objects it uses hashes there, and the hash ring is built
    # from the nodes' (random) ports: one rank may well use one node only. The job as a whole uses both.
    pair = {"{}:{}".format(*r.address) for r in relay_pair}
    assert len(nodes) == 8 and all(set(x) <= pair for x in nodes), nodes
    assert set().union(*map(set, nodes)) == pair, nodes
    assert diff_run("diff_uppercase.py", 8, tmp_path, "sharded", relay=url) == direct("diff_uppercase.py", 8, tmp_path)


def test_redis_eight_ranks(redis_server, tmp_path):
    url, client = redis_server
    assert diff_run("diff_uppercase.py", 8, tmp_path, "redis8", relay=url) == direct("diff_uppercase.py", 8, tmp_path)
    assert fmpi_keys(client) == []
