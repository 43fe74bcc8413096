"""A real redis-server per test module, on a free port, nothing persisted, always stopped."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_server():
    """(url, password) of a fresh redis-server; the password is required."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed (scripts/test.sh installs it)"
    port, password = _free_port(), "pw-for-tests"
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
