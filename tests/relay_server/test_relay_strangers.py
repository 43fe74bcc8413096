"""A relay survives any one client: floods of half frames, hostile JSON, too many strangers (issue 25, item 4).

A real ``fmpi-relay`` process; the strangers are raw sockets. Memory is read
from /proc (the relay's resident set), so the bound is the one a host sees.
"""

from __future__ import annotations

import socket
import struct
import time

from tests_support import RelayProcess

from fmpi.rendezvous.relay_connection import RelayConnection, register, wait_world
from fmpi.wire.relay_protocol import (
    HEADER_SIZE,
    VERSION,
    Kind,
    decode_body,
    decode_header,
)

TOKEN = "t" * 24
MiB = 1 << 20


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _a_job_still_runs(relay: RelayProcess, job: str) -> None:
    launcher = RelayConnection(relay.url)
    launcher.send(Kind.CREATE, {"job": job, "token": TOKEN, "size": 1, "fill_timeout": 10})
    launcher.expect(Kind.CREATED, 10)
    rank = RelayConnection(relay.url)
    register(rank, job, TOKEN, 0, "inc", [("127.0.0.1", 1)], 10)
    assert wait_world(rank, time.monotonic() + 10) == 1
    rank.close()
    launcher.close()


def _answer(sock: socket.socket, timeout: float = 10.0) -> tuple[Kind, dict]:
    sock.settimeout(timeout)
    data = b""
    while len(data) < HEADER_SIZE:
        chunk = sock.recv(HEADER_SIZE - len(data))
        assert chunk, "the relay closed the connection without an answer"
        data += chunk
    kind, length = decode_header(data, 64 * MiB)
    body = b""
    while len(body) < length:
        body += sock.recv(length - len(body))
    return kind, decode_body(kind, body)


def _flood_of_half_frames(relay: RelayProcess) -> list[socket.socket]:
    """300 strangers each announce a 1 MiB CREATE, send half of it, then wait."""
    strangers = []
    half = 512 * 1024
    for _ in range(300):
        s = socket.create_connection(relay.address)
        strangers.append(s)
        try:
            s.sendall(struct.pack("!BBHI", VERSION, Kind.CREATE, 0, MiB - 1) + b"x" * half)
        except OSError:
            pass  # refused (busy) or dropped before it said it all: that is the relay defending itself
    return strangers


def _comes_down_to(pid: int, start: int, bound: int, seconds: float) -> int:
    """RSS above `start` once it is under `bound`, or when `seconds` have passed (a loaded machine: the relay
    may still be closing the strangers' sockets)."""
    deadline = time.monotonic() + seconds
    while True:
        grown = _rss(pid) - start
        if grown < bound or time.monotonic() > deadline:
            return grown
        time.sleep(0.25)


def test_a_flood_of_half_frames_leaves_the_relay_bounded_and_serving():
    # Three floods: the peak stays bounded, and each time the relay comes back down (nothing is retained
    # per stranger, and the allocator's freed blocks are handed back).
    relay = RelayProcess()
    try:
        _a_job_still_runs(relay, "warm")  # (imports and first allocations done)
        start = _rss(relay.proc.pid)
        peaks, afters = [], []
        for round_ in range(3):
            strangers = _flood_of_half_frames(relay)
            time.sleep(1.0)
            peaks.append(_rss(relay.proc.pid) - start)
            _a_job_still_runs(relay, f"during-{round_}")
            for s in strangers:
                s.close()
            afters.append(_comes_down_to(relay.proc.pid, start, 50 * MiB, 30))  # (given back 0.5 s after the last)
            _a_job_still_runs(relay, f"after-{round_}")
    finally:
        relay.stop()
    # At most about 256 x (128 KiB + 64 KiB) + 32 MiB of budget is held for strangers (strangers.py), plus
    # what the allocator adds; once they are gone it is handed back to the system.
    assert max(peaks) < 100 * MiB, f"300 half frames grew the relay by {max(peaks) / MiB:.0f} MiB"
    assert max(afters) < 50 * MiB, f"the relay kept {[a >> 20 for a in afters]} MiB after each flood"


def test_deeply_nested_json_gets_one_clean_error_and_the_relay_keeps_serving():
    relay = RelayProcess(keep_stderr=True)
    try:
        body = b"[" * (MiB - 1)
        s = socket.create_connection(relay.address)
        s.sendall(struct.pack("!BBHI", VERSION, Kind.CREATE, 0, len(body)) + body)
        kind, answer = _answer(s)
        s.close()
        assert kind is Kind.ERROR and answer["code"] == "protocol", answer
        _a_job_still_runs(relay, "ok")
    finally:
        err = relay.stop()
    assert "Traceback" not in err and "RecursionError" not in err, err


def test_too_many_silent_strangers_do_not_lock_out_a_real_client():
    relay = RelayProcess()
    strangers = []
    try:
        for _ in range(1200):  # more than the relay will hold before they say who they are
            try:
                strangers.append(socket.create_connection(relay.address, timeout=5))
            except OSError:
                break
        time.sleep(0.5)
        _a_job_still_runs(relay, "real")
        assert relay.proc.poll() is None
    finally:
        for s in strangers:
            s.close()
        relay.stop()
