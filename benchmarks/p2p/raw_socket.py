"""The physical ceiling: the same ping-pong and streaming tests over a bare Python TCP socket pair.

Two processes on loopback, blocking sockets, TCP_NODELAY, recv_into a
preallocated buffer: what any Python message layer can at best approach.
Prints the same JSON lines as osu_p2p.py.

Each process is pinned to a CPU of its own, as ranks are (fmpi's waiting
ranks each keep a core busy; on Lambda every rank is a machine). Left to the
scheduler, the pair sometimes lands on one CPU, where a blocking ping-pong
needs no cross-CPU wake-up and its small-message latency drops about 4x on a
virtual machine (10 against 25-55 us here): a different experiment, and one
that changed from run to run. ``--same-cpu`` measures that case on purpose.
"""

import argparse
import json
import os
import socket
import time


def recv_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if not n:
            raise ConnectionError("peer closed")
        got += n


def pin(cpu_index: int, same_cpu: bool) -> None:
    """Pin this process to the `cpu_index`-th allowed CPU (both to the first with `same_cpu`)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2 or same_cpu:
        os.sched_setaffinity(0, {cpus[0 if same_cpu else cpu_index % len(cpus)]})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-size", type=int, default=64 << 20)
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--same-cpu", action="store_true", help="pin both processes to one CPU (see the module doc)")
    args = parser.parse_args()
    sizes = [0] + [1 << k for k in range(0, args.max_size.bit_length()) if (1 << k) <= args.max_size]
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    child = os.fork()
    pin(0 if child else 1, args.same_cpu)
    if child == 0:
        sock = socket.create_connection(("127.0.0.1", port))
    else:
        sock, _ = server.accept()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    lead = child != 0
    for size in sizes:
        # A 0-byte message is still a message (fmpi sends its header): the
        # socket's equivalent is 1 byte, since sending b"" sends nothing at all.
        buf = bytearray(max(size, 1))
        view = memoryview(buf)
        n = max(3, min(int(args.seconds / (20e-6 + size / 1e9)), 20000))
        start = time.perf_counter()
        for _ in range(n):
            if lead:
                sock.sendall(view)
                recv_exact(sock, view)
            else:
                recv_exact(sock, view)
                sock.sendall(view)
        latency = (time.perf_counter() - start) / n / 2
        bandwidth = None
        if size:
            n_bw = max(2, n // args.window)
            start = time.perf_counter()
            ack = memoryview(bytearray(1))
            for _ in range(n_bw):
                if lead:
                    for _ in range(args.window):
                        sock.sendall(view)
                    recv_exact(sock, ack)
                else:
                    for _ in range(args.window):
                        recv_exact(sock, view)
                    sock.sendall(ack)
            bandwidth = size * args.window * n_bw / (time.perf_counter() - start)
        if lead:
            print(json.dumps({"size": size, "latency_us": latency * 1e6, "bandwidth_MBps": bandwidth and bandwidth / 1e6}), flush=True)
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)


if __name__ == "__main__":
    main()
