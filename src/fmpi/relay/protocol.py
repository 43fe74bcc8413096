"""The relay wire protocol: versioned, length-prefixed frames with JSON bodies.

Frame = 8-byte header (version u8, kind u8, reserved u16, body length u32,
network order) + body. Control bodies are UTF-8 JSON objects, validated
against the field table below before anything acts on them. Nothing on this
wire is ever unpickled: the relay talks to strangers on the internet.

FORWARD frames are the exception: binary, for relayed links. Their body is a
rank (i32, network order) followed by raw bytes of the fmpi frame stream
between two ranks, cut into chunks of any size up to the frame limit. From a
rank, the rank is the destination; from the relay, it is the source, which
the relay sets itself (a member cannot speak for another). The relay never
looks inside the chunk.
"""

from __future__ import annotations

import enum
import json
import struct
from typing import Any

VERSION = 1
HEADER = struct.Struct("!BBHI")
HEADER_SIZE = HEADER.size

# What a relay accepts from a client by default; the relay's own frames
# (a world table of thousands of ranks) may be larger.
MAX_CLIENT_FRAME = 1 << 20
MAX_SERVER_FRAME = 64 << 20


class Kind(enum.IntEnum):
    # launcher -> relay
    CREATE = 1  # create a job and watch its events
    END = 2  # the launcher is done with the job
    # rank -> relay
    REGISTER = 10
    FINISHED = 11  # the rank finalized (with its exit code, and its link statistics)
    OUTPUT = 12  # a chunk of the rank's stdout/stderr, forwarded to the launcher
    OBSERVE = 13  # before REGISTER: where does the relay see this connection come from?
    LINK = 14  # a link to a peer came up or failed over (reported to the launcher)
    # either -> relay
    ABORT = 20
    # relay -> client
    CREATED = 30
    REGISTERED = 31
    WORLD = 32
    EVENT = 33  # job progress for the launcher: joined, world, finished, lost, output, link
    ERROR = 34  # a request was refused, or the job failed; `code` says which
    UNDELIVERABLE = 35  # a FORWARD could not reach its rank (it finished, or is gone)
    PEER_LOST = 36  # a member of the job left without finalizing
    OBSERVED = 37  # answer to OBSERVE (and what the probe port says to any connection)
    # rank <-> relay <-> rank
    FORWARD = 40  # binary: rank (i32) + a chunk of a relayed link's byte stream


class ProtocolError(Exception):
    """Bytes that are not a valid frame of this protocol."""


# Required fields per client request and their types. Anything else is ignored.
_FIELDS: dict[Kind, dict[str, type | tuple[type, ...]]] = {
    Kind.CREATE: {"job": str, "token": str, "size": int, "fill_timeout": (int, float)},
    Kind.END: {"job": str},
    Kind.REGISTER: {"job": str, "token": str, "rank": int, "incarnation": str, "endpoints": list},
    Kind.FINISHED: {"code": int},
    Kind.OUTPUT: {"stream": str, "data": str},
    Kind.ABORT: {"code": int, "reason": str},
    Kind.LINK: {"peer": int, "kind": str, "seconds": (int, float)},
}

FORWARD_RANK = struct.Struct("!i")
FORWARD_OVERHEAD = HEADER_SIZE + FORWARD_RANK.size


def encode(kind: Kind, body: dict[str, Any] | None = None) -> bytes:
    payload = json.dumps(body or {}, separators=(",", ":")).encode()
    return HEADER.pack(VERSION, kind, 0, len(payload)) + payload


def forward_header(rank: int, nbytes: int) -> bytes:
    """Header and rank of a FORWARD frame carrying `nbytes` of stream."""
    return HEADER.pack(VERSION, Kind.FORWARD, 0, FORWARD_RANK.size + nbytes) + FORWARD_RANK.pack(rank)


def decode_header(data: bytes | memoryview, max_body: int, offset: int = 0) -> tuple[Kind, int]:
    version, kind, _reserved, length = HEADER.unpack_from(data, offset)
    if version != VERSION:
        raise ProtocolError(f"relay protocol version {version} is not supported (this side speaks {VERSION})")
    try:
        kind = Kind(kind)
    except ValueError:
        raise ProtocolError(f"unknown frame kind {kind}") from None
    if length > max_body:
        raise ProtocolError(f"frame of {length} bytes exceeds the limit of {max_body} bytes")
    return kind, length


def decode_body(kind: Kind, payload: bytes) -> dict[str, Any]:
    try:
        body = json.loads(payload) if payload else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"{kind.name} body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ProtocolError(f"{kind.name} body must be a JSON object")
    for name, typ in _FIELDS.get(kind, {}).items():
        value = body.get(name)
        if not isinstance(value, typ) or isinstance(value, bool):
            raise ProtocolError(f"{kind.name} needs field {name!r} of type {_type_name(typ)}")
    return body


def parse_endpoint(item: object) -> tuple[str, int]:
    """Validate one [host, port] pair from the wire."""
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], int)):
        raise ProtocolError("an endpoint must be a [host, port] pair")
    if isinstance(item[1], bool) or not 0 < item[1] < 65536 or len(item[0]) > 255:
        raise ProtocolError(f"invalid endpoint {item!r}")
    return item[0], item[1]


def parse_endpoints(raw: list) -> list[tuple[str, int]]:
    """Validate a list of [host, port] pairs from the wire."""
    endpoints = []
    for item in raw[:16]:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], int)):
            raise ProtocolError("endpoints must be a list of [host, port] pairs")
        if not 0 < item[1] < 65536 or len(item[0]) > 255:
            raise ProtocolError(f"invalid endpoint {item!r}")
        endpoints.append((item[0], item[1]))
    return endpoints


def _type_name(typ: type | tuple[type, ...]) -> str:
    if isinstance(typ, tuple):
        return " or ".join(t.__name__ for t in typ)
    return typ.__name__
