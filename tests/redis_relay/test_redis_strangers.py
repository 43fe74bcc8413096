"""A stranger with the job's Redis URL attacks a running relayed job (issue 25 item 2).

It watches every command (MONITOR), reads every key of every type, pushes
a forged abort on rank 0's inbox and a forged event on the launcher's list,
injects forged and tampered chunks into rank 1's mailbox and replays chunks
it captured there. The job must end rc=0 with its exact results, the
stranger must never see the plaintext marker the job sends, and each
refusal is logged once (one line per process that refused something).
"""

from __future__ import annotations

import codecs
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests_support import fmpirun_argv, load_script

TARGET = Path(__file__).with_name("stranger_target.py")
REFUSAL = "refused a message in Redis"
_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')


class Monitor:
    """A raw MONITOR connection: every command the server runs, as Redis prints it (arguments escaped)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
        self.sock.sendall(f"AUTH {parts.password}\r\nMONITOR\r\n".encode())
        self.data = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        self.sock.settimeout(None)
        while chunk := self.sock.recv(1 << 20):
            with self._lock:
                self.data += chunk

    def lines(self) -> list[bytes]:
        with self._lock:
            return bytes(self.data).split(b"\r\n")

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(5)


def pushed_chunks(monitor: Monitor, mbox: bytes) -> list[bytes]:
    """The items of every mailbox push to `mbox` seen so far (the script's arguments after dest and ttl)."""
    items = []
    for line in monitor.lines():
        if b'"EVALSHA"' not in line and b'"EVAL"' not in line:
            continue
        args = [codecs.escape_decode(a)[0] for a in _ARG.findall(line)]
        if mbox in args:
            items.extend(args[args.index(mbox) + 3 :])
    return items


def everything_readable(client) -> bytes:
    """The names and values of every key in the server, whatever its type."""
    seen = bytearray()
    for key in client.scan_iter(match="*", count=1000):
        seen += key
        kind = client.type(key)
        if kind == b"string":
            value = [client.get(key) or b""]
        elif kind == b"list":
            value = client.lrange(key, 0, -1)
        elif kind == b"hash":
            value = [b for pair in client.hgetall(key).items() for b in pair]
        elif kind == b"set":
            value = list(client.smembers(key))
        elif kind == b"zset":
            value = client.zrange(key, 0, -1)
        elif kind == b"stream":
            value = [b for _, fields in client.xrange(key) for pair in fields.items() for b in pair]
        else:
            value = []
        for v in value:
            seen += v
    return bytes(seen)


def expected(n: int) -> dict[int, list[str]]:
    prog = load_script(str(TARGET.relative_to(TARGET.parents[2])), "stranger_target")
    note = prog.MARKER
    answers = {(i, r): prog.digest(prog.payload(i, r).tobytes() + note) for i in range(prog.ROUNDS) for r in range(1, n)}
    want = {0: [f"round {i} from {r} {answers[i, r]}" for i in range(prog.ROUNDS) for r in range(1, n)]}
    for r in range(1, n):
        want[r] = [f"round {i} got {answers[i, r]}" for i in range(prog.ROUNDS)]
    return want


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


@pytest.mark.parametrize("n", [2, 4])
def test_a_stranger_with_the_redis_url_reads_nothing_and_cannot_forge(redis_server, tmp_path, n):
    url, client = redis_server
    marker = load_script(str(TARGET.relative_to(TARGET.parents[2])), "stranger_target").MARKER
    monitor = Monitor(url)
    job = subprocess.Popen(
        fmpirun_argv("-n", str(n), "--relay", url, "--channel", "relay", sys.executable, str(TARGET), str(tmp_path)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        # The stranger finds the job (SCAN), then waits for relayed chunks to rank 1 to capture.
        meta = wait_for(lambda: [k for k in client.scan_iter(match="fmpi:*:meta")], 30, "the job's keys")[0]
        base = meta[: -len(b"meta")]
        mbox1 = base + b"mbox:1"
        captured = wait_for(lambda: pushed_chunks(monitor, mbox1), 30, "a relayed chunk for rank 1")
        readable = [everything_readable(client) for _ in range(20)]  # while the job runs
        client.rpush(base + b"inbox:0", b'{"kind":"abort","code":7,"reason":"forged by a stranger","rank":1}')
        client.rpush(base + b"events", b'{"type":"abort","kind":"abort","code":7,"reason":"forged","rank":1}')
        client.rpush(base + b"events", b'{"type":"finished","code":3,"rank":2}')
        client.rpush(base + b"events", b"{\"proof\":" + b"[" * 1_000_000)  # JSON too deep for the decoder's stack
        tampered = bytearray(captured[0])
        tampered[-1] ^= 1
        client.rpush(mbox1, b"\0\0\0\0a forged chunk" * 100, bytes(tampered), *captured[:5])
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
        monitor.close()
    assert job.returncode == 0, f"exit {job.returncode}\n{err[-4000:]}"
    assert "Traceback" not in err, err[-4000:]  # (a reading thread that dies says so, and hears nothing more)
    for r, lines in expected(n).items():
        assert (tmp_path / f"rank{r}.txt").read_text().splitlines() == lines, f"rank {r}'s results"
    for snapshot in readable:
        assert marker not in snapshot, "plaintext of relayed data readable in Redis"
    assert marker not in b"\n".join(monitor.lines()), "plaintext seen through MONITOR"
    refusals = [line for line in err.splitlines() if REFUSAL in line]
    # One line per process that refused something, and at most one summary of the ones after it
    firsts = [line for line in refusals if "more like it since the last report" not in line]
    by_process = sorted(re.search(r"fmpi: (rank \d+|fmpirun)", line).group(1) for line in firsts)
    assert by_process == ["fmpirun", "rank 0", "rank 1"], "\n".join(refusals) or err[-3000:]
    assert len(refusals) - len(firsts) <= len(firsts), "\n".join(refusals)
    assert client.keys("fmpi:*") == []
