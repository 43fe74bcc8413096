"""rediss://: Redis as the relay over TLS, with a real redis-server serving TLS only (its --tls-port).

The installed redis-server must be built with TLS (Debian's is); the test
skips, saying so, when it is not.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
from tls_support import JOB
from tls_support import make_pki as _make_pki
from tests_support import fmpirun_argv, free_port

from fmpi.natpunch.sockets import bind_reusable
from fmpi.rendezvous.redis import RedisJob, RedisRank, connect
from fmpi.rendezvous.relay_connection import RelayError

PASSWORD = "pw-for-tls-tests"
TOKEN = "k" * 24


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory):
    pytest.importorskip("cryptography")
    pytest.importorskip("redis")
    binary = shutil.which("redis-server")
    if not binary:
        pytest.skip("redis-server is not installed")
    pki = _make_pki(tmp_path_factory.mktemp("redis-pki"))
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--requirepass", PASSWORD, "--tls-cert-file", str(pki["cert"]), "--tls-key-file", str(pki["key"]),
         "--tls-ca-cert-file", str(pki["ca"]), "--tls-auth-clients", "no"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = f"rediss://:{PASSWORD}@127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while True:
        if proc.poll() is not None:
            out = proc.stdout.read()
            if "TLS" in out and ("not supported" in out.lower() or "Bad directive" in out):
                pytest.skip(f"this redis-server has no TLS support: {out[-300:]}")
            raise RuntimeError(f"redis-server with TLS did not start: {out[-1000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)
    yield url, pki
    proc.terminate()
    proc.wait(10)
    proc.stdout.close()


def test_rediss_needs_a_trusted_certificate(tls_redis, monkeypatch):
    url, pki = tls_redis
    monkeypatch.delenv("FMPI_TLS_CA", raising=False)
    with pytest.raises(RelayError, match="TLS certificate is not trusted: for a private CA set FMPI_TLS_CA"):
        connect(url, timeout=5)
    monkeypatch.setenv("FMPI_TLS_CA", str(pki["ca"]))
    client = connect(url, timeout=5)
    assert client.ping()
    assert client.connection_pool.connection_class.__name__.endswith("SSLConnection")
    client.close()


def test_rediss_registration_comes_from_the_ranks_shared_port(tls_redis, monkeypatch):
    """The address Redis observes is the rank's punching port, over TLS as over plain redis://."""
    url, pki = tls_redis
    monkeypatch.setenv("FMPI_TLS_CA", str(pki["ca"]))
    job = RedisJob(url, f"tlsjob-{time.monotonic_ns()}", TOKEN, 1, 10.0, lambda kind, event: None)
    shared = bind_reusable("127.0.0.1", 0)
    port = shared.getsockname()[1]
    try:
        member = RedisRank(url, job.job, TOKEN, source=("127.0.0.1", port))
        assert member.observed_address() == ("127.0.0.1", port)
        member.register(0, "i", [("127.0.0.1", port)])
        assert member.wait_world(time.monotonic() + 10) == 1
        assert member.lookup([0])["peers"][0]["observed"] == ["127.0.0.1", port]
        for client in member.hand_over():
            client.close()
    finally:
        shared.close()
        job.end()


@pytest.mark.parametrize("channel", ["relay", "auto"])
def test_a_whole_job_through_rediss(tls_redis, tmp_path, channel):
    url, pki = tls_redis
    prog = tmp_path / "job.py"
    prog.write_text(JOB)
    env = dict(os.environ, FMPI_CHANNEL=channel, FMPI_TLS_CA=str(pki["ca"]), OPENBLAS_NUM_THREADS="1")
    result = subprocess.run(
        fmpirun_argv("-n", "3", "--relay", url, sys.executable, str(prog)),
        capture_output=True, text=True, timeout=180, env=env,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(l.split()[:3] for l in result.stdout.splitlines()) == [["rank", str(r), "ok"] for r in range(3)]
    assert PASSWORD not in result.stdout + result.stderr
