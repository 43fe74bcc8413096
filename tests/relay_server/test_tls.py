"""fmpi-relay over TLS: real relay processes with a certificate made here, real fmpirun jobs.

A private CA and a relay certificate (for 127.0.0.1 and localhost) are made
with `cryptography`; ranks and the launcher trust the CA through FMPI_TLS_CA.
Checks: whole jobs through the TLS relay (FMPI_CHANNEL=relay, so every byte
of data crosses it encrypted, and auto); a client that does not trust the CA
is refused with a message that says so; plain TCP clients, silent clients
and clients that stall in the handshake get a clean error or are cut off,
and the relay keeps serving.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tls_support import JOB
from tls_support import make_pki as _make_pki
from tests_support import RelayProcess, fmpirun_argv

from fmpi.rendezvous.relay_connection import (
    RelayConnection,
    RelayError,
    register,
    wait_world,
)
from fmpi.wire.relay_protocol import Kind, encode

TOKEN = "t" * 24


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    pytest.importorskip("cryptography")
    return _make_pki(tmp_path_factory.mktemp("pki"))


class TlsRelay(RelayProcess):
    """A real `fmpi-relay --tls-cert ... --tls-key ...` on a free port; ``stop()`` returns its stderr."""

    def __init__(self, pki: dict[str, Path], *args: str) -> None:
        super().__init__("--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"]), *args, scheme="tls", keep_stderr=True)


@pytest.fixture
def tls_relay(pki):
    started: list[TlsRelay] = []

    def start(*args: str) -> TlsRelay:
        started.append(TlsRelay(pki, *args))
        return started[-1]

    yield start
    for r in started:
        r.stop()


@pytest.fixture
def trust(pki, monkeypatch):
    """This test process trusts the test CA (as FMPI_TLS_CA)."""
    monkeypatch.setenv("FMPI_TLS_CA", str(pki["ca"]))
    return str(pki["ca"])





def _run_job(tmp_path: Path, url: str, channel: str, n: int = 3, env_extra: dict | None = None, timeout: float = 120):
    prog = tmp_path / "tls_job.py"
    prog.write_text(JOB)
    env = dict(os.environ, FMPI_CHANNEL=channel, OPENBLAS_NUM_THREADS="1", **(env_extra or {}))
    return subprocess.run(
        fmpirun_argv("-n", str(n), "-v", "--relay", url, sys.executable, str(prog)),  # (-v: the links line)
        capture_output=True, text=True, timeout=timeout, env=env,
    )


@pytest.mark.parametrize("channel, linkword", [("relay", "3 relayed"), ("auto", "0 relayed")])
def test_a_whole_job_through_a_tls_relay(tls_relay, pki, tmp_path, channel, linkword):
    relay = tls_relay()
    result = _run_job(tmp_path, relay.url, channel, env_extra={"FMPI_TLS_CA": str(pki["ca"])})
    assert result.returncode == 0, result.stderr
    lines = sorted(result.stdout.splitlines())
    assert [l.split()[:3] for l in lines] == [["rank", str(r), "ok"] for r in range(3)], result.stdout
    assert len({l.split()[3] for l in lines}) == 1
    assert linkword in result.stderr, result.stderr  # the links line: relayed through the TLS relay, or direct


def test_tls_rank_connections_are_encrypted(tls_relay, trust):
    """What the rank hands to its transport is a TLS socket (the data path of a relayed link)."""
    relay = tls_relay()
    watcher = RelayConnection(relay.url)
    watcher.send(Kind.CREATE, {"job": "enc", "token": TOKEN, "size": 1, "fill_timeout": 10})
    watcher.expect(Kind.CREATED, 10)
    rank = RelayConnection(relay.url)
    assert isinstance(rank.sock, ssl.SSLSocket) and rank.sock.version() in ("TLSv1.2", "TLSv1.3")
    register(rank, "enc", TOKEN, 0, "inc", [("127.0.0.1", 1)], 10)
    assert wait_world(rank, time.monotonic() + 10) == 1
    rank.close()
    watcher.close()


def test_a_client_that_does_not_trust_the_certificate_is_refused(tls_relay, pki, tmp_path, monkeypatch):
    relay = tls_relay()
    monkeypatch.delenv("FMPI_TLS_CA", raising=False)
    with pytest.raises(RelayError, match=r"TLS certificate is not trusted \(.*\); if it is signed by a private CA, set FMPI_TLS_CA="):
        RelayConnection(relay.url)
    monkeypatch.setenv("FMPI_TLS_CA", str(pki["other_ca"]))
    with pytest.raises(RelayError, match="TLS certificate is not trusted .*not signed by the CA in FMPI_TLS_CA"):
        RelayConnection(relay.url)
    # the whole launcher says so, and fails at once
    t0 = time.monotonic()
    result = _run_job(tmp_path, relay.url, "auto", env_extra={"FMPI_TLS_CA": str(pki["other_ca"])}, timeout=60)
    assert result.returncode != 0
    assert "fmpirun: error: cannot reach the relay at " + relay.url in result.stderr, result.stderr
    assert "TLS certificate is not trusted" in result.stderr
    assert time.monotonic() - t0 < 20
    # the certificate must also name the host connected to (not only chain to the CA)
    from fmpi.rendezvous.relay_connection import tls_client_context

    context = tls_client_context()
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED


def test_plain_tcp_clients_get_a_clean_error_and_the_relay_keeps_serving(tls_relay, trust):
    relay = tls_relay()
    host, port = relay.address
    plain_url = f"tcp://{host}:{port}"
    # the fmpi client speaking plain TCP to the TLS port: told to use tls://
    conn = RelayConnection(plain_url)
    conn.send(Kind.CREATE, {"job": "p", "token": TOKEN, "size": 1, "fill_timeout": 5})
    with pytest.raises(RelayError) as info:
        conn.recv(10)
    # (the relay's TLS layer drops a non-TLS client without an alert)
    assert f"the relay at {plain_url} closed the connection without answering" in str(info.value)
    assert f"if it serves TLS (fmpi-relay --tls-cert), use tls://{host}:{port}" in str(info.value)
    conn.close()
    # raw garbage, half a frame, and a client that never speaks
    garbage = socket.create_connection(relay.address, timeout=5)
    garbage.sendall(b"\x00" * 64)
    half = socket.create_connection(relay.address, timeout=5)
    half.sendall(encode(Kind.CREATE, {"job": "h"})[:5])
    # a TLS client (the relay's own kind) still gets served meanwhile
    watcher = RelayConnection(relay.url)
    watcher.send(Kind.CREATE, {"job": "ok", "token": TOKEN, "size": 1, "fill_timeout": 10})
    watcher.expect(Kind.CREATED, 10)
    rank = RelayConnection(relay.url)
    register(rank, "ok", TOKEN, 0, "i", [("127.0.0.1", 1)], 10)
    assert wait_world(rank, time.monotonic() + 10) == 1
    for s in (garbage, half):
        s.settimeout(10)
        try:
            assert s.recv(4096) is not None  # closed or an alert: either way it ends
        except OSError:
            pass
        s.close()
    rank.close()
    watcher.close()
    assert relay.proc.poll() is None


def test_clients_stalled_in_the_tls_handshake_are_cut_off_without_blocking_others(pki, trust):
    """Slow loris at the TLS layer: half a ClientHello, then silence. The handshake timeout (here 1 s) ends it."""
    from fmpi.relay_server.server import RelayThread, server_tls_context

    relay = RelayThread("127.0.0.1", 0, first_frame_timeout=1.0, probe_port=None,
                        ssl_context=server_tls_context(str(pki["cert"]), str(pki["key"])))
    try:
        url = "tls://127.0.0.1:{}".format(relay.address[1])
        stalled = []
        for _ in range(5):
            s = socket.create_connection(relay.address, timeout=5)
            s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a TLS handshake record header, then nothing
            stalled.append(s)
        t0 = time.monotonic()
        watcher = RelayConnection(url, timeout=5)
        watcher.send(Kind.CREATE, {"job": "busy", "token": TOKEN, "size": 1, "fill_timeout": 10})
        watcher.expect(Kind.CREATED, 5)
        assert time.monotonic() - t0 < 1.0  # not queued behind the stalled handshakes
        for s in stalled:
            s.settimeout(5)
            try:
                while s.recv(4096):
                    pass
            except OSError:
                pass  # reset: also an end
            s.close()
        assert time.monotonic() - t0 < 4.0  # each was cut after about 1 s
        # and a TLS client that completes the handshake but never sends a frame gets the first-frame timeout
        quiet = RelayConnection(url, timeout=5)
        with pytest.raises(RelayError) as info:
            quiet.recv(5)
        assert info.value.code == "timeout"
        quiet.close()
        watcher.close()
    finally:
        relay.stop()


def test_a_job_sharded_over_two_tls_relays_links_them_over_tls(tls_relay, trust, tmp_path):
    """FMPI_SHARD_RENDEZVOUS=1 over tls://a,b: the relays link to each other over TLS, each checking the other's
    certificate against FMPI_TLS_CA (in their environment, as the ranks'); relayed chunks cross between them."""
    a, b = tls_relay("--log-level", "INFO"), tls_relay("--log-level", "INFO")
    url = "tls://{}:{},{}:{}".format(*a.address, *b.address)
    result = _run_job(tmp_path, url, "relay", n=4, env_extra={"FMPI_SHARD_RENDEZVOUS": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"links: \d+ \(0 direct, 0 punched, [1-9]\d* relayed\)", result.stderr), result.stderr
    for relay in (a, b):
        assert "world of 4 ranks published (2 registered here" in relay.stop()


def test_a_relay_that_does_not_trust_the_others_certificate_fails_a_sharded_job(tls_relay, pki, monkeypatch, tmp_path):
    monkeypatch.setenv("FMPI_TLS_CA", str(pki["other_ca"]))
    a = tls_relay("--log-level", "INFO")  # (trusts another CA only: b's certificate is not good enough for it)
    monkeypatch.setenv("FMPI_TLS_CA", str(pki["ca"]))
    b = tls_relay("--log-level", "INFO")
    url = "tls://{}:{},{}:{}".format(*a.address, *b.address)
    result = _run_job(tmp_path, url, "relay", n=2, env_extra={"FMPI_SHARD_RENDEZVOUS": "1"}, timeout=90)
    assert result.returncode != 0
    assert "lost one of its relays" in result.stderr, result.stderr
    assert "certificate verify failed" in a.stop()
