"""Checks that cost nothing, made before anything is built, uploaded or invoked; and the ping after deployment.

Before packaging (seconds of work, a 50 MB upload, a function update):

* the relay: fmpirun can reach a ``--relay`` (it must, to create the job),
  and an address it announces to the functions is not one they can never
  reach (a loopback or private IP, on real AWS);
* the execution role exists (a new function needs one);
* the account (or the function) has the concurrency for N ranks at once.

After deployment, before the N invocations: the *ping*, one synchronous
invocation of the version just deployed, which imports the bundle in the
real runtime and connects to the relay from inside the function
(``lambda_runtime/ping.py``), so a relay the functions cannot reach is one
clear error instead of N ranks waiting for the fill timeout.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from ...lambda_runtime.aws_errors import explain
from ...lambda_runtime.event import EVENT_VERSION
from ...rendezvous.urls import parse
from .aws import LambdaError
from .billing import Report, report_from_tail
from .options import unreachable_from_lambda

CONNECT_TIMEOUT = 5.0


def check_relay_from_here(url: str) -> None:
    """fmpirun itself must reach every relay of `url` (it creates the job there)."""
    for host, port in parse(url).addresses:
        try:
            socket.create_connection((host, port), timeout=CONNECT_TIMEOUT).close()
        except OSError as exc:
            raise LambdaError(
                f"cannot reach the relay at {host}:{port} from this machine ({exc}): is it running, and is its port "
                "open? (the functions would not reach it either)"
            ) from None


def check_advertised(url: str, real_aws: bool) -> None:
    """A relay address the functions can never reach, refused before anything is deployed (real AWS only)."""
    if not real_aws:
        return  # an emulator runs functions on this machine: loopback is fine there
    for host, _port in parse(url).addresses:
        why = unreachable_from_lambda(host)
        if why is not None:
            raise LambdaError(
                f"the relay address {host} is {why}: Lambda functions cannot connect to it. Run the relay on a "
                "host with a public address and pass --relay tcp://PUBLIC_HOST:PORT, or run fmpirun there with "
                "--relay-listen 0.0.0.0:7000 --relay-advertise PUBLIC_IP:7000 (docs/lambda.md, 'The relay')"
            )


def ping(lam: Any, name: str, version: str, relay_url: str, tls_ca: str | None, bundled: bool) -> tuple[dict[str, Any], Report | None]:
    """Invoke the deployed version once: it must import (numpy included) and reach the relay; returns its answer
    and its REPORT line (from the log tail: the ping is billed too)."""
    event: dict[str, Any] = {"fmpi": EVENT_VERSION, "ping": True, "relay": relay_url}
    if tls_ca:
        event["tls_ca"] = tls_ca
    try:
        reply = lam.invoke(FunctionName=name, Qualifier=version, Payload=json.dumps(event), LogType="Tail")
    except Exception as exc:
        raise LambdaError(explain(exc, f"invoke {name}:{version}")) from None
    body = reply["Payload"].read().decode("utf-8", "replace")
    if reply.get("FunctionError"):
        try:
            err = json.loads(body)
            detail = f"{err.get('errorType')}: {err.get('errorMessage')}"
        except ValueError:
            detail = body[:500]
        raise LambdaError(f"the deployed function {name} does not start: {detail}. See its logs: aws logs tail /aws/lambda/{name}")
    answer = json.loads(body)
    if "numpy_error" in answer:
        if not bundled:
            raise LambdaError(
                f"the deployed function {name} cannot import numpy ({answer['numpy_error']}): with --no-bundle-deps, "
                "a layer must provide numpy and aws-lambda-powertools (--layers ARN)"
            )
        raise LambdaError(
            f"the deployed function {name} cannot import numpy ({answer['numpy_error']}): the bundled build does not "
            "suit the Lambda runtime; provide numpy with --layers ARN --no-bundle-deps"
        )
    if "relay_error" in answer:
        raise LambdaError(
            f"the function cannot reach the relay at {relay_url}: {answer['relay_error']}. The ranks connect to it "
            "from AWS: the relay must listen on a public address with its port open to the internet "
            "(--relay-listen 0.0.0.0:PORT --relay-advertise PUBLIC_IP:PORT, and a security group or firewall rule "
            "for TCP PORT from 0.0.0.0/0); a tls:// relay's certificate must be trusted (FMPI_TLS_CA is sent to "
            "the ranks). No rank was started"
        )
    return answer, report_from_tail(reply.get("LogResult"))
