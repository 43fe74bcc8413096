"""A stand-in for the AWS Lambda Runtime API, the endpoints ``awslambdaric`` talks to.

One ``RuntimeAPIServer`` serves one execution environment (one OS process
running ``awslambdaric <handler>``). It speaks the subset of
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html that
awslambdaric uses:

  GET  /2018-06-01/runtime/invocation/next            -> 200 + event and its headers
  POST /2018-06-01/runtime/invocation/{id}/response   -> 202
  POST /2018-06-01/runtime/invocation/{id}/error      -> 202
  POST /2018-06-01/runtime/init/error                 -> 202

awslambdaric sends /next, /response and /error through its C extension
(aws-lambda-cpp + libcurl, HTTP/1.1) and /init/error through ``http.client``;
both work against ``http.server`` in HTTP/1.1 as long as every response
carries Content-Length.

The server listens on TCP (``127.0.0.1:<port>``) or, for a handler process
inside another network namespace, on a Unix socket that the process reaches
through a small in-process forwarder (see ``executor.BOOT``).

Shared by the moto shim and the LocalStack executor plugin.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import socketserver
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PREFIX = "/2018-06-01/runtime"
MAX_RESPONSE = 6 * 1024 * 1024  # Lambda's synchronous response limit

_FINISH_LOCK = threading.Lock()


@dataclass
class Invocation:
    request_id: str
    payload: bytes
    timeout_s: float
    function_arn: str
    trace_id: str = ""
    client_context: str | None = None
    # Filled in by the server and the executor.
    delivered_at: float | None = None  # time.time() when /next handed it out
    deadline_ms: int | None = None  # epoch ms sent as Lambda-Runtime-Deadline-Ms
    delivered: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    outcome: str | None = None  # "response" | "error" | "init_error" | "exit" | "timeout"
    body: bytes = b""
    error_type: str | None = None
    finished_at: float | None = None

    def finish(self, outcome: str, body: bytes, error_type: str | None = None) -> bool:
        """Record how the invocation ended; the first writer wins (response vs. timeout vs. exit)."""
        with _FINISH_LOCK:
            if self.done.is_set():
                return False
            self.outcome, self.body, self.error_type = outcome, body, error_type
            self.finished_at = time.time()
            self.done.set()
            return True


def _quiet_handle_error(server, request, client_address) -> None:
    # A runtime that is SIGKILLed while parked in /next resets its connection: expected.
    if not isinstance(sys.exc_info()[1], (ConnectionError, BrokenPipeError)):
        socketserver.BaseServer.handle_error(server, request, client_address)


class _TCPServer(ThreadingHTTPServer):
    daemon_threads = True
    handle_error = _quiet_handle_error


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    handle_error = _quiet_handle_error


class RuntimeAPIServer:
    """Serves invocations to one runtime process; ``submit()`` queues one."""

    def __init__(self, host: str = "127.0.0.1", unix_path: str | None = None) -> None:
        self._queue: queue.Queue[Invocation | None] = queue.Queue()
        self._current: dict[str, Invocation] = {}
        self._pending: list[Invocation] = []
        self._closed = threading.Event()
        self.init_error: tuple[bytes, str | None] | None = None
        self.first_next_at: float | None = None  # the end of the init phase
        self.unix_path = unix_path
        handler = _make_handler(self)
        if unix_path is None:
            self.httpd = _TCPServer((host, 0), handler)
            self.address = "%s:%d" % self.httpd.server_address[:2]
        else:
            if os.path.exists(unix_path):
                os.unlink(unix_path)
            self.httpd = _UnixServer(unix_path, handler)
            self.address = unix_path
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="runtime-api", daemon=True
        )
        self._thread.start()

    def submit(self, inv: Invocation) -> None:
        self._pending.append(inv)
        if self.init_error is not None:
            inv.finish("init_error", *self.init_error)
            return
        self._queue.put(inv)

    def close(self) -> None:
        self._closed.set()
        self._queue.put(None)
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=2)
        if self.unix_path is not None:
            try:
                os.unlink(self.unix_path)
            except OSError:
                pass


def _make_handler(server: RuntimeAPIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            if self.connection.family != socket.AF_UNIX:
                # keep-alive plus header and body in two send()s: without this, Nagle
                # and delayed ACKs add about 40 ms to every warm invocation.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def address_string(self) -> str:
            return "runtime"

        def log_message(self, fmt, *args) -> None:  # no access log on stderr
            pass

        def _reply(self, code: int, body: bytes = b"", headers: dict | None = None) -> None:
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)

        def _body(self) -> bytes:
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def do_GET(self) -> None:
            self._reply(*_next_invocation(server, self.path))

        def do_POST(self) -> None:
            body = self._body()
            self._reply(*_post(server, self.path, body, self.headers.get("Lambda-Runtime-Function-Error-Type")))

    return Handler


Reply = tuple[int, bytes, dict[str, str]]


def _next_invocation(server: RuntimeAPIServer, path: str) -> Reply:
    """GET .../invocation/next: block until an invocation is queued, then deliver it with its deadline."""
    if path != f"{PREFIX}/invocation/next":
        return 404, b'{"errorType":"NotFound"}', {}
    if server.first_next_at is None:
        server.first_next_at = time.time()
    while True:
        try:
            inv = server._queue.get(timeout=0.5)
        except queue.Empty:
            if server._closed.is_set():
                return 500, b'{"errorType":"ShuttingDown"}', {}
            continue
        if inv is None:
            return 500, b'{"errorType":"ShuttingDown"}', {}
        break
    now = time.time()
    inv.delivered_at = now
    inv.deadline_ms = int((now + inv.timeout_s) * 1000)
    server._current[inv.request_id] = inv
    inv.delivered.set()
    headers = {
        "Content-Type": "application/json",
        "Lambda-Runtime-Aws-Request-Id": inv.request_id,
        "Lambda-Runtime-Deadline-Ms": str(inv.deadline_ms),
        "Lambda-Runtime-Invoked-Function-Arn": inv.function_arn,
        "Lambda-Runtime-Trace-Id": inv.trace_id,
    }
    if inv.client_context:
        headers["Lambda-Runtime-Client-Context"] = inv.client_context
    return 200, inv.payload, headers


def _post(server: RuntimeAPIServer, path: str, body: bytes, etype: str | None) -> Reply:
    """POST of an init error, or of an invocation's response or error."""
    accepted = (202, b'{"status":"OK"}', {})
    if path == f"{PREFIX}/init/error":
        server.init_error = (body, etype)
        for inv in list(server._pending):  # fail what waits for this environment
            inv.finish("init_error", body, etype)
        return accepted
    parts = path.split("/")  # ['', '2018-06-01', 'runtime', 'invocation', id, 'response'|'error']
    if not (len(parts) == 6 and parts[3] == "invocation" and parts[5] in ("response", "error")):
        return 404, b'{"errorType":"NotFound"}', {}
    inv = server._current.get(parts[4])
    if inv is None:
        return 400, b'{"errorType":"InvalidRequestID","errorMessage":"unknown request id"}', {}
    outcome = "response" if parts[5] == "response" else "error"
    if outcome == "error" and not etype:
        # awslambdaric's C client sends no Lambda-Runtime-Function-Error-Type header: the error type is in the body.
        try:
            etype = json.loads(body).get("errorType")
        except (ValueError, AttributeError):
            etype = "Unhandled"
    if outcome == "response" and len(body) > MAX_RESPONSE:
        inv.finish(
            "error",
            json.dumps({
                "errorType": "Function.ResponseSizeTooLarge",
                "errorMessage": f"Response payload size exceeded maximum allowed payload size ({MAX_RESPONSE} bytes).",
            }).encode(),
            "Function.ResponseSizeTooLarge",
        )
        return 413, b'{"errorType":"RequestEntityTooLarge"}', {}
    inv.finish(outcome, body, etype)
    return accepted
