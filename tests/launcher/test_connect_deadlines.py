"""fmpirun against a relay that accepts and never answers, or speaks another protocol than its URL says.

Each is one error line within the connect timeout (10 s) naming the likely
scheme mismatch, exit status 1 — never a hang, never a traceback.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time

import pytest
from tests_support import fmpirun_argv

PROGRAM = ("python", "-c", "pass")
CONNECT_TIMEOUT = 10  # redis_connect.connect's and the fmpi-relay client's default
SLACK = 15  # fmpirun's own start on a loaded machine


@pytest.fixture
def silent_server():
    """(port, accepted): a listening socket that accepts every connection and never sends a byte."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # (the listener was shut down: the test is over)
                return
            held.append(conn)
            accepted.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], accepted
    listener.shutdown(socket.SHUT_RDWR)
    listener.close()
    thread.join(5)
    for conn in held:
        conn.close()


def _fmpirun(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    result = subprocess.run(fmpirun_argv("-n", "1", *args, *PROGRAM), capture_output=True, text=True, timeout=90)
    return result, time.monotonic() - start


def _one_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fmpirun: error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "scheme, hint",
    [("redis", "is it a Redis server? (an fmpi-relay is tcp://host:port)"), ("rediss", "if this is a plain Redis, use redis://")],
)
def test_a_redis_url_whose_server_never_answers_fails_within_the_connect_timeout(silent_server, scheme, hint):
    port, _ = silent_server
    result, elapsed = _fmpirun("--relay", f"{scheme}://127.0.0.1:{port}/0")
    line = _one_error(result)
    assert f"Redis at {scheme}://127.0.0.1:{port}/0 did not answer within {CONNECT_TIMEOUT} s" in line
    assert hint in line
    assert CONNECT_TIMEOUT - 1 < elapsed < CONNECT_TIMEOUT + SLACK, f"took {elapsed:.1f} s"


def test_rediss_at_a_plain_redis_names_the_scheme(redis_server):
    url = redis_server[0].replace("redis://", "rediss://", 1)
    result, elapsed = _fmpirun("--relay", url)
    line = _one_error(result)
    assert "did not answer within" in line and "rediss:// speaks TLS: if this is a plain Redis, use redis://" in line
    assert "pw-for-tests" not in line
    assert elapsed < CONNECT_TIMEOUT + SLACK, f"took {elapsed:.1f} s"


def test_redis_at_an_fmpi_relay_names_the_scheme(relay_process):
    relay = relay_process()
    host, port = relay.address
    result, _ = _fmpirun("--relay", f"redis://{host}:{port}/0")
    assert "it does not speak the Redis protocol (an fmpi-relay is tcp://host:port)" in _one_error(result)


def test_tcp_at_a_redis_server_names_the_scheme(redis_server):
    port = redis_server[0].rsplit(":", 1)[1].split("/")[0]
    result, _ = _fmpirun("--relay", f"tcp://127.0.0.1:{port}")
    line = _one_error(result)
    assert "did not answer" in line and "is it a Redis server? Redis is redis://host:port" in line


def test_ctrl_c_while_connecting_is_one_line(silent_server):
    port, accepted = silent_server
    proc = subprocess.Popen(
        fmpirun_argv("-n", "1", "--relay", f"redis://127.0.0.1:{port}/0", *PROGRAM), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert accepted.wait(30), "fmpirun never connected"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err.strip() == "fmpirun: interrupted", err


def test_after_set_up_a_redis_connection_waits_without_limit(redis_server):
    # The set-up deadline must not stay on the socket: the rendezvous BLPOPs for longer than the connect
    # timeout, on a first connection and on one redis-py makes again inside a command.
    from fmpi.rendezvous.redis_connect import connect

    client = connect(redis_server[0], timeout=0.5)
    try:
        assert client.blpop(["fmpi-test:nothing"], timeout=1) is None
        client.connection_pool.disconnect()  # the next command connects again, inside redis-py
        assert client.blpop(["fmpi-test:nothing"], timeout=1) is None
    finally:
        client.close()
