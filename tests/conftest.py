"""Shared fixtures: run real fmpirun jobs and real MPICH (mpiexec + mpi4py) jobs on the same program."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests_support import RelayProcess, free_port, run_fmpi, run_mpich

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# Test modules that run alone, after the parallel pass (scripts/test.sh runs the suite with pytest-xdist,
# then `-m serial` without it). Each is here for a reason a second worker would break:
SERIAL_MODULES = {
    "tests/transport/test_spinning.py": "compares CPU shares of spinning ranks",
    "tests/relay_server/test_relay_strangers.py": "holds a relay's RSS to a bound during floods",
    "tests/natpunch/test_simultaneous_open.py": "punch deadlines checked within tenths of a second",
    "tests/natpunch/test_natlab.py": "refusal and timeout times of the lab's gateways",
    "tests/nat/test_nat_faults.py": "a dead rank named within seconds",
    "tests/nat/test_nat_detection.py": "the set-up of a pair with an unknown NAT held under 2 s (a 1 s punch)",
    "tests/relay_server/test_relay_reconnect.py": "a reconnect within a 2 s grace, checked to half a second",
    "tests/lambda/test_lambda_faults.py": "heartbeat and function-timeout deadlines",
    "tests/lambda/test_lambda_local_network.py": "the emulator's one bridge (fmpill0) and its addresses",
    "tests/lambda/test_lambda_launch_rate.py": "the fan-out's waves checked to tenths of a second",
    "tests/lambda/test_lambda_spares.py": "a job that must end before a straggler 20 s late starts",
    "tests/lambda/test_lambda_checkpoint.py": "each launch must pass a checkpoint within a 10 s function timeout",
    "tests/launcher/test_connect_deadlines.py": "connect deadlines checked to the second",
    "tests/util/test_retry.py": "retry pacing checked to tenths of a second",
    "tests/transport/test_link_strangers.py": "link set-up behind 100 strangers within half a second of alone",
    "tests/reliability/test_failure_detection.py": "a frozen rank named within 5 s; no false positives",
    "tests/compat/test_mpi4py_suite_stage.py": "mpi4py's whole suite at N = 1, 2, 4 loads both cores; its stall watchdog needs them",
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if Path(item.fspath).relative_to(REPO).as_posix() in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)


def _script(tmp_path: Path, source: str, name: str = "prog.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


@pytest.fixture
def program(tmp_path):
    """program(source) -> path of a script file holding the dedented source."""
    counter = iter(range(1000))
    return lambda source: _script(tmp_path, source, f"prog{next(counter)}.py")


@pytest.fixture
def fmpi():
    return run_fmpi


@pytest.fixture
def mpich():
    return run_mpich


@pytest.fixture
def as_under_mpich(program):
    """as_under_mpich(source, n, *args) -> fmpi's Run: the differential check most compat tests make. The
    program runs under fmpirun and under MPICH's mpiexec; both must succeed and print the same lines (in
    any order across ranks)."""

    def check(source: str, n: int, *args: str):
        path = program(source)
        mine = run_fmpi(n, path, *args)
        assert mine.returncode == 0, mine.stderr[-3000:]
        ref = run_mpich(n, path, *args)
        assert ref.returncode == 0, ref.stderr[-3000:]
        assert mine.sorted_lines() == ref.sorted_lines()
        return mine

    return check


# ---------------------------------------------------------------- a real redis-server (module-scoped)
@pytest.fixture(scope="module")
def redis_server():
    """(url, client) of a fresh redis-server on a free port, password required, nothing persisted; always stopped."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed (scripts/test.sh installs it)"
    port, password = free_port(), "pw-for-tests"
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--requirepass", password],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, password=password)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)
    yield f"redis://:{password}@127.0.0.1:{port}/0", client
    client.close()
    proc.terminate()
    proc.wait(10)

# ---------------------------------------------------------------- fmpi-relay processes
@pytest.fixture
def relay_process():
    """Factory: relay_process(*extra_args) -> RelayProcess; every one started is stopped after the test."""
    started: list[RelayProcess] = []

    def start(*args: str) -> RelayProcess:
        started.append(RelayProcess(*args))
        return started[-1]

    yield start
    for r in started:
        r.stop()


@pytest.fixture(scope="module")
def relay_pair():
    """Two fmpi-relay processes shared by a test module (tests use their own job ids)."""
    pair: list[RelayProcess] = []
    try:
        pair.append(RelayProcess())
        pair.append(RelayProcess())
        yield pair
    finally:
        for r in pair:
            r.stop()


# ---------------------------------------------------------------- a real Redis Cluster
CLUSTER_PASSWORD = "pw-for-cluster-tests"


@dataclass
class RedisCluster:
    """Three masters made by ``redis-cli --cluster create`` (every slot) and a fourth master that serves no
    slot (`spare`): a job pointed at it is always redirected to the node that owns its slot."""

    ports: list[int]  # the three slot owners, then the spare
    password: str
    clients: dict[int, object]  # port -> redis-py client of that node

    def url(self, port: int, db: int = 0) -> str:
        return f"redis://:{self.password}@127.0.0.1:{port}/{db}"

    @property
    def spare(self) -> int:
        return self.ports[-1]

    def owner(self, key: str) -> int:
        """The port of the master serving `key`'s slot."""
        from redis.crc import key_slot

        slot = key_slot(key.encode())
        for start, end, master, *_ in self.clients[self.ports[0]].execute_command("CLUSTER SLOTS"):
            if start <= slot <= end:
                return int(master[1])
        raise AssertionError(f"no node serves slot {slot}")

    def fmpi_keys(self) -> dict[int, list[bytes]]:
        """Every node's fmpi:* keys (the nodes that have any)."""
        found = {p: list(c.scan_iter(match="fmpi:*", count=1000)) for p, c in self.clients.items()}
        return {p: keys for p, keys in found.items() if keys}

    def evalsha_calls(self) -> dict[int, int]:
        return {p: c.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0) for p, c in self.clients.items()}

    def move_slot(self, slot: int, to_port: int) -> None:
        """Migrate `slot` (and its keys) to the master at `to_port`, as a resharding does, while clients use it."""
        source = next(p for p in self.ports if p != to_port and slot in self.slots_of(p))
        src, dst = self.clients[source], self.clients[to_port]
        src_id, dst_id = (c.execute_command("CLUSTER MYID") for c in (src, dst))
        dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
        while keys := src.execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
            src.execute_command("MIGRATE", "127.0.0.1", to_port, "", 0, 5000, "AUTH", self.password, "KEYS", *keys)
        for client in self.clients.values():
            client.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)

    def slots_of(self, port: int) -> set[int]:
        slots: set[int] = set()
        for start, end, master, *_ in self.clients[self.ports[0]].execute_command("CLUSTER SLOTS"):
            if int(master[1]) == port:
                slots.update(range(start, end + 1))
        return slots


def _cluster_ports(count: int) -> list[int]:
    """Free ports whose cluster bus ports (port + 10000) are free too."""
    import random
    import socket

    ports: list[int] = []
    while len(ports) < count:
        port = random.randrange(20000, 45000)
        if port in ports:
            continue
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        ports.append(port)
    return ports


def _cluster_ok(client, nodes: int) -> bool:
    info = client.execute_command("CLUSTER INFO")
    if not isinstance(info, dict):  # redis-py parses it into a dict; a raw reply is "key:value" lines
        info = dict(line.split(":", 1) for line in info.decode().split())
    return info["cluster_state"] == "ok" and int(info["cluster_known_nodes"]) == nodes


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory):
    """A real local Redis Cluster (see RedisCluster), password required, nothing persisted; always stopped."""
    import redis

    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    assert server and cli, "redis-server and redis-cli are needed (scripts/test.sh installs them)"
    workdir = tmp_path_factory.mktemp("redis-cluster")
    ports, password = _cluster_ports(4), CLUSTER_PASSWORD
    procs = [
        subprocess.Popen(
            [
                server, "--port", str(p), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                "--cluster-config-file", str(workdir / f"nodes-{p}.conf"), "--cluster-node-timeout", "5000",
                "--save", "", "--appendonly", "no", "--requirepass", password, "--masterauth", password,
                "--dir", str(workdir),
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for p in ports
    ]
    clients = {p: redis.Redis(host="127.0.0.1", port=p, password=password) for p in ports}
    try:
        deadline = time.monotonic() + 10
        for client in clients.values():
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    assert time.monotonic() < deadline, "a cluster node did not start"
                    time.sleep(0.05)
        auth = ["-a", password, "--no-auth-warning"]
        for argv in (
            ["--cluster", "create", *(f"127.0.0.1:{p}" for p in ports[:3]), "--cluster-replicas", "0", "--cluster-yes"],
            ["--cluster", "add-node", f"127.0.0.1:{ports[3]}", f"127.0.0.1:{ports[0]}"],
        ):
            done = subprocess.run([cli, *argv, *auth], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, f"redis-cli {' '.join(argv)}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        deadline = time.monotonic() + 30
        while not all(_cluster_ok(c, len(ports)) for c in clients.values()):
            assert time.monotonic() < deadline, "the Redis Cluster did not reach cluster_state:ok"
            time.sleep(0.1)
        yield RedisCluster(ports, password, clients)
    finally:
        for client in clients.values():
            client.close()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
