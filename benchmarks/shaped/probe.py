"""What the shaped network really does between two hosts: round trip and bandwidth over plain TCP.

Run by netlab.py --probe (``serve`` on one host, ``client`` on another); also
a small program of its own:

    python probe.py serve PORT
    python probe.py client HOST PORT --pings 2000 --megabytes 64

The client prints one JSON line: round-trip percentiles of 1-byte ping-pongs
(TCP_NODELAY, 1 ms apart) and the throughput of one stream of ``megabytes``,
its first ``burst`` excluded (the token bucket lets that pass at line speed).
"""

from __future__ import annotations

import argparse
import json
import socket
import time

CHUNK = 1 << 20


def serve(port: int) -> None:
    listener = socket.create_server(("0.0.0.0", port))
    print("ready", flush=True)
    for _ in range(2):  # one connection for pings, one for the stream
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while data := conn.recv(CHUNK):
                if len(data) == 1:
                    conn.sendall(data)
            conn.sendall(b"done")


def client(host: str, port: int, pings: int, megabytes: int, burst: int) -> dict:
    with socket.create_connection((host, port)) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts = []
        for _ in range(pings):
            start = time.perf_counter()
            conn.sendall(b"x")
            conn.recv(1)
            rtts.append(time.perf_counter() - start)
            time.sleep(0.001)
        conn.shutdown(socket.SHUT_WR)
        conn.recv(16)
    payload = bytes(CHUNK)
    with socket.create_connection((host, port)) as conn:
        sent, start = 0, None
        while sent < megabytes * CHUNK:
            conn.sendall(payload)
            sent += CHUNK
            if start is None and sent >= burst:
                start, counted_from = time.perf_counter(), sent
        conn.shutdown(socket.SHUT_WR)
        conn.recv(16)  # the server has read everything
        seconds = time.perf_counter() - start
    rtts.sort()
    pick = lambda q: round(rtts[int(q * (len(rtts) - 1))] * 1e6, 1)  # noqa: E731
    return {
        "rtt_us": {"p10": pick(0.1), "median": pick(0.5), "p90": pick(0.9), "p99": pick(0.99)},
        "mbit_s": round((sent - counted_from) * 8 / seconds / 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="role", required=True)
    s = sub.add_parser("serve")
    s.add_argument("port", type=int)
    c = sub.add_parser("client")
    c.add_argument("host")
    c.add_argument("port", type=int)
    c.add_argument("--pings", type=int, default=2000)
    c.add_argument("--megabytes", type=int, default=64)
    c.add_argument("--burst", type=int, default=4 * CHUNK, help="bytes not counted at the start of the stream")
    args = parser.parse_args()
    if args.role == "serve":
        serve(args.port)
    else:
        print(json.dumps(client(args.host, args.port, args.pings, args.megabytes, args.burst)), flush=True)


if __name__ == "__main__":
    main()
