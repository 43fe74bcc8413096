"""The launcher's check, before it invokes N ranks, that the deployed function works: imports, and reaches the relay.

fmpirun invokes the version it just deployed once, synchronously, with
``{"fmpi": 1, "ping": true, "relay": URL, "tls_ca": PEM}``. The answer says
which fmpi, Python and numpy the runtime loaded (a numpy built for the
wrong glibc fails here), and whether the relay is reachable *from inside
the function*: a relay on a loopback or private address, behind a
firewall, or with a certificate the ranks cannot verify is found with one
invocation, not after N ranks waited for the fill timeout.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

from .. import rendezvous
from ..rendezvous.relay_connection import RelayError
from ..rendezvous.urls import parse
from .process_state import TLS_CA_VARIABLE, write_ca

RELAY_TIMEOUT = 5.0  # seconds for the relay check: a rank's own connect would wait as long


def is_ping(event: Any) -> bool:
    return isinstance(event, dict) and bool(event.get("ping"))


def pong(event: dict[str, Any]) -> dict[str, Any]:
    """What the launcher learns from a ping (see the module docstring)."""
    from .. import __version__

    answer: dict[str, Any] = {"fmpi": __version__, "python": sys.version.split()[0]}
    try:
        import numpy

        answer["numpy"] = numpy.__version__
    except Exception as exc:  # noqa: BLE001
        answer["numpy_error"] = f"{type(exc).__name__}: {exc}"
    relay = event.get("relay")
    if isinstance(relay, str) and relay:
        answer.update(check_relay(relay, event.get("tls_ca")))
    return answer


def check_relay(url: str, tls_ca: str | None) -> dict[str, Any]:
    """{"relay_seconds": s, "observed": [ip, port], "probe": bool} or {"relay_error": why}."""
    saved = os.environ.get(TLS_CA_VARIABLE)
    if isinstance(tls_ca, str) and tls_ca:
        os.environ[TLS_CA_VARIABLE] = write_ca(tls_ca)
    t0 = time.monotonic()
    try:
        found = rendezvous.check(url, RELAY_TIMEOUT)
        answer: dict[str, Any] = {"relay_seconds": round(time.monotonic() - t0, 3)}
        if "observed" in found:
            answer["observed"] = list(found["observed"])
        if found.get("probe_port"):
            answer["probe"] = _reachable(parse(url).first[0], found["probe_port"])
        return answer
    except (RelayError, OSError) as exc:
        return {"relay_error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a Redis client error: reported, never raised
        return {"relay_error": f"{type(exc).__name__}: {exc}"}
    finally:
        if saved is None:
            os.environ.pop(TLS_CA_VARIABLE, None)
        else:
            os.environ[TLS_CA_VARIABLE] = saved


def _reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=RELAY_TIMEOUT).close()
        return True
    except OSError:
        return False
