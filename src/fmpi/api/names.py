"""MPI name publishing: ``Publish_name``, ``Unpublish_name``, ``Lookup_name`` (MPI's server/client rendezvous).

A server publishes the port it accepts at under a service name; a client of
another job looks the name up and connects (``api/ports.py``):

    port = MPI.Open_port(); MPI.Publish_name("svc", port); MPI.COMM_WORLD.Accept(port)
    port = MPI.Lookup_name("svc"); MPI.COMM_WORLD.Connect(port)

The names are kept by the relay the rank's job uses (``--relay``): fmpi-relay
(its first relay, for a URL of several), Redis, or a memory:// store. Jobs
that share the relay share its names. A name belongs to the job whose process
published it and is withdrawn when that job ends (see ``wire/names.py`` for the
rules and limits; ``rendezvous/redis_names.py`` for Redis).

Error classes, as MPICH's where it has them:

* ``Publish_name`` of a name already published: ``ERR_NAME`` (as MPICH); of a bad
  name (empty, longer than ``MAX_PORT_NAME``): ``ERR_NAME``; a full name table or a
  service that cannot be reached: ``ERR_SERVICE``;
* ``Lookup_name`` of a name not published (or any failure): ``ERR_NAME``;
* ``Unpublish_name`` of a name not published, or published with another port:
  ``ERR_SERVICE`` (MPICH withdraws the name whatever the port; fmpi compares it,
  so a process that knows only the name cannot withdraw another's service).

The `info` argument is accepted (``INFO_NULL``, None or an ``Info``) and ignored.
"""

from __future__ import annotations

from typing import Any

from ..rank.names import name_service
from ..wire.errors import RelayError
from . import exceptions as err
from . import runtime
from .info import Info

# RelayError codes the name service gives (wire/names.py) that say something of the name itself.
_NAME_CODES = ("name_taken", "bad_name")


def publish_name(service_name: Any, port_name: Any, info: Any = None) -> None:
    service, port = _text(service_name), _text(port_name)
    _info(info)
    names = _service("Publish_name", err.ERR_SERVICE)
    try:
        names.publish(service, port)
    except (RelayError, OSError) as exc:
        code = err.ERR_NAME if getattr(exc, "code", "") in _NAME_CODES else err.ERR_SERVICE
        raise err.Exception(code, f"Publish_name({service!r}): {exc}") from None


def unpublish_name(service_name: Any, port_name: Any, info: Any = None) -> None:
    service, port = _text(service_name), _text(port_name)
    _info(info)
    names = _service("Unpublish_name", err.ERR_SERVICE)
    try:
        names.unpublish(service, port)
    except (RelayError, OSError) as exc:
        raise err.Exception(err.ERR_SERVICE, f"Unpublish_name({service!r}): {exc}") from None


def lookup_name(service_name: Any, info: Any = None) -> str:
    service = _text(service_name)
    _info(info)
    names = _service("Lookup_name", err.ERR_NAME)
    try:
        return names.lookup(service)
    except (RelayError, OSError) as exc:
        raise err.Exception(err.ERR_NAME, f"Lookup_name({service!r}): {exc}") from None


def _text(value: Any) -> str:
    """A name argument as mpi4py takes it: str, or bytes (UTF-8); anything else is a TypeError."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    raise TypeError(f"expected str or bytes, {type(value).__name__} found")


def _info(info: Any) -> None:
    if info is not None and not isinstance(info, Info):
        raise TypeError(f"Cannot convert {type(info).__name__} to mpi4py.MPI.Info")


def _service(call: str, error_class: int) -> Any:
    session = runtime.state.session
    if session is None:
        raise err.Exception(error_class, f"{call}: this process is not an fmpi rank (run it under fmpirun): "
                                         "there is no relay to keep names")
    return name_service(session.spec)
