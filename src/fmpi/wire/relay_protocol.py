"""The relay wire protocol: versioned, length-prefixed frames with JSON bodies.

Frame = 8-byte header (version u8, kind u8, reserved u16, body length u32,
network order) + body. Control bodies are UTF-8 JSON objects, validated
against the field table below before anything acts on them. Nothing on this
wire is ever unpickled: the relay talks to strangers on the internet.

WORLD carries the job's size only; a rank looks up the peers it links to
(LOOKUP / PEERS, below), so what the relay sends grows O(N) with the job,
not O(N^2).

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
# (a PEERS answer to a long LOOKUP, a DSO reply) may be larger.
MAX_CLIENT_FRAME = 1 << 20
MAX_SERVER_FRAME = 64 << 20


class Kind(enum.IntEnum):
    # launcher -> relay
    CREATE = 1  # create a job and watch its events (again, with "resume", after the relay restarted)
    END = 2  # the launcher is done with the job
    # rank -> relay
    REGISTER = 10  # take a rank slot (with "resume": true, take it back on a restarted relay)
    FINISHED = 11  # the rank finalized (with its exit code, and its link statistics)
    OUTPUT = 12  # a chunk of the rank's stdout/stderr, forwarded to the launcher
    OBSERVE = 13  # before REGISTER: where does the relay see this connection come from?
    LINK = 14  # a link to a peer came up or failed over (reported to the launcher)
    HEARTBEAT = 15  # rank <-> relay, every second: "still here" (a dead host behind a NAT sends no FIN)
    RESYNCED = 16  # answer to PEER_BACK: this rank's FORWARDs to that rank start at a frame boundary from here
    LOOKUP = 17  # after the world: the records (endpoints, observed, probe) of these ranks, please
    # either -> relay
    ABORT = 20
    # relay -> client
    CREATED = 30
    REGISTERED = 31
    WORLD = 32
    EVENT = 33  # job progress for the launcher: joined, world, finished, away, lost, output, link, rejoined
    ERROR = 34  # a request was refused, or the job failed; `code` says which
    UNDELIVERABLE = 35  # a FORWARD could not reach its rank (it finished, or is gone)
    PEER_LOST = 36  # a member of the job left without finalizing
    OBSERVED = 37  # answer to OBSERVE (and what the probe port says to any connection)
    PEER_BACK = 38  # a member reconnected after its connection broke: its relayed stream starts over
    PEERS = 39  # answer to LOOKUP: the records found, and why the others are not
    # rank <-> relay <-> rank
    FORWARD = 40  # binary: rank (i32) + a chunk of a relayed link's byte stream
    # distributed shared objects (relay_server/dso/store.py)
    DSO_CREATE = 50  # launcher -> relay: host a job's shared objects on this node (a job without rank slots)
    DSO_ATTACH = 51  # first frame of a DSO client connection: job and token
    DSO_ATTACHED = 52  # relay -> client: attached; the relay's limits
    DSO_CALL = 53  # binary: request id (u32), JSON length (u32), JSON {type, name, method, args}, value bytes
    DSO_REPLY = 54  # binary, same layout: JSON {ok: true, ...} or {error, message}
    # relay <-> relay: the shards of a job whose rendezvous is spread over several relays (relay_server/shards.py)
    SHARD_HELLO = 60  # first frame of a shard link: job, token, the sender's shard index
    SHARD = 61  # a shard's control message to another: records, full, abort, lost, notices ({"type": ...})
    SHARD_FORWARD = 62  # binary: source (i32), destination (i32) + a chunk of a relayed link, across shards
    # MPI name publishing (wire/names.py): a connection's one request, proving a live job of this relay; answered by
    # NAME_DONE or ERROR (name_taken, name_unknown, name_port, names_full, bad_name, unknown_job, auth), then closed
    NAME_PUBLISH = 70  # job, token, name, port: publish `name` for the job (until it ends or unpublishes)
    NAME_UNPUBLISH = 71  # job, token, name, port: withdraw `name`, if it is published with that port
    NAME_LOOKUP = 72  # job, token, name: the port published under `name`
    NAME_DONE = 73  # relay -> client: the request was done; a lookup's answer carries "port"


class ProtocolError(Exception):
    """Bytes that are not a valid frame of this protocol."""


# Required fields per client request and their types. Anything else is ignored
# here; optional fields (CREATE's and REGISTER's "resume", REGISTER's "probe",
# "observed", "heartbeat", FINISHED's "links", ...) are checked where they are used.
_FIELDS: dict[Kind, dict[str, type | tuple[type, ...]]] = {
    Kind.CREATE: {"job": str, "token": str, "size": int, "fill_timeout": (int, float)},
    Kind.END: {"job": str},
    Kind.REGISTER: {"job": str, "token": str, "rank": int, "incarnation": str, "endpoints": list},
    Kind.FINISHED: {"code": int},
    Kind.OUTPUT: {"stream": str, "data": str},
    Kind.ABORT: {"code": int, "reason": str},
    Kind.LINK: {"peer": int, "kind": str, "seconds": (int, float)},
    Kind.RESYNCED: {"rank": int},
    Kind.LOOKUP: {"ranks": list},
    Kind.DSO_CREATE: {"job": str, "token": str},
    Kind.DSO_ATTACH: {"job": str, "token": str},
    Kind.SHARD_HELLO: {"job": str, "token": str, "shard": int},
    Kind.SHARD: {"type": str},
    Kind.NAME_PUBLISH: {"job": str, "token": str, "name": str, "port": str},
    Kind.NAME_UNPUBLISH: {"job": str, "token": str, "name": str, "port": str},
    Kind.NAME_LOOKUP: {"job": str, "token": str, "name": str},
}

NAME_REQUESTS = (Kind.NAME_PUBLISH, Kind.NAME_UNPUBLISH, Kind.NAME_LOOKUP)


def abort_cause(value: Any) -> dict[str, Any] | None:
    """An ABORT's optional "cause", if well formed: {"lost": rank}, {"finalized": rank} or {"aborted": true};
    anything else is None.

    A rank that fails only because a peer died or ended (``sys.exit`` on that
    rank finalizes it, then its process exits with the status), or because
    the job was already aborted, says so; the launcher then names the real cause.
    """
    if isinstance(value, dict) and len(value) == 1:
        for key in ("lost", "finalized"):
            rank = value.get(key)
            if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
                return {key: rank}
        if value.get("aborted") is True:
            return {"aborted": True}
    return None


def abort_body(code: int, reason: str, cause: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body of an ABORT frame a rank sends."""
    return {"code": code, "reason": reason, **({"cause": cause} if cause else {})}


FORWARD_RANK = struct.Struct("!i")
SHARD_FORWARD_RANKS = struct.Struct("!ii")  # source, destination


def encode(kind: Kind, body: dict[str, Any] | None = None) -> bytes:
    payload = json.dumps(body or {}, separators=(",", ":")).encode()
    return HEADER.pack(VERSION, kind, 0, len(payload)) + payload


def forward_header(rank: int, nbytes: int) -> bytes:
    """Header and rank of a FORWARD frame carrying `nbytes` of stream."""
    return HEADER.pack(VERSION, Kind.FORWARD, 0, FORWARD_RANK.size + nbytes) + FORWARD_RANK.pack(rank)


def shard_forward_header(source: int, dest: int, nbytes: int) -> bytes:
    """Header and ranks of a SHARD_FORWARD frame carrying `nbytes` of stream from `source` to `dest`."""
    size = SHARD_FORWARD_RANKS.size + nbytes
    return HEADER.pack(VERSION, Kind.SHARD_FORWARD, 0, size) + SHARD_FORWARD_RANKS.pack(source, dest)


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
    except RecursionError:  # '[[[[...' a million deep: the decoder's own stack gives out
        raise ProtocolError(f"{kind.name} body is nested too deeply") from None
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


# ------------------------------------------------------------- world and lookups
# WORLD says only the job's size (O(1) bytes per rank, O(N) for the relay in all; a table of every peer for every
# rank was O(N^2)). A rank asks for the records of the peers it links to when it first needs them (links are
# lazy): LOOKUP {"ranks": [...]}, at most MAX_LOOKUP a frame, answered by PEERS {"peers": [record, ...],
# "missing": [{"rank", "reason"}, ...]}.
MAX_LOOKUP = 4096

Endpoint = tuple[str, int]
PeerRecord = tuple[int, list[Endpoint], Endpoint, "Endpoint | None"]  # rank, endpoints, observed, probe


def peer_record(rank: int, endpoints: list[Endpoint], observed: Endpoint, probe: Endpoint | None) -> dict[str, Any]:
    """One rank's record in a PEERS answer: where it listens, where the rendezvous saw it, where the probe port did."""
    record: dict[str, Any] = {"rank": rank, "endpoints": [list(e) for e in endpoints], "observed": list(observed)}
    if probe:
        record["probe"] = list(probe)
    return record


def lookup_ranks(body: dict[str, Any]) -> list[int]:
    """The ranks a LOOKUP asks for, checked."""
    ranks = body["ranks"]
    if len(ranks) > MAX_LOOKUP or not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
        raise ProtocolError(f"LOOKUP needs a list of at most {MAX_LOOKUP} ranks")
    return ranks


def peers_answer(found: list[dict[str, Any]], missing: dict[int, str]) -> dict[str, Any]:
    """The body of a PEERS frame: `found` records (``peer_record``), and rank -> why it has no record."""
    return {"peers": found, "missing": [{"rank": r, "reason": why} for r, why in missing.items()]}


def parse_peers(body: dict[str, Any]) -> tuple[list[PeerRecord], dict[int, str]]:
    """A PEERS answer: its records and its missing ranks (rank -> why), checked."""
    found, missing = body.get("peers"), body.get("missing", [])
    if not isinstance(found, list) or not isinstance(missing, list):
        raise ProtocolError("PEERS needs lists of peers and missing ranks")
    records: list[PeerRecord] = []
    try:
        for p in found:
            probe = parse_endpoint(p["probe"]) if p.get("probe") is not None else None
            records.append((_rank(p["rank"]), parse_endpoints(p["endpoints"]), parse_endpoint(p["observed"]), probe))
        why = {_rank(m["rank"]): str(m.get("reason", "no record"))[:300] for m in missing}
    except (KeyError, TypeError, AttributeError):
        raise ProtocolError("PEERS with a malformed record") from None
    return records, why


def _rank(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"a rank must be an integer, not {value!r}")
    return value


def _type_name(typ: type | tuple[type, ...]) -> str:
    if isinstance(typ, tuple):
        return " or ".join(t.__name__ for t in typ)
    return typ.__name__


# ----------------------------------------------------------------- DSO frames
# DSO_CALL / DSO_REPLY body: request id (u32) and JSON length (u32), the JSON
# object, then the value's raw bytes (never unpickled: numpy data is read with
# frombuffer and a whitelisted dtype).
DSO_PREFIX = struct.Struct("!II")
MAX_DSO_JSON = 64 << 10


def dso_head(kind: Kind, request: int, meta: dict[str, Any], nbytes: int) -> bytes:
    """Everything of a DSO_CALL / DSO_REPLY frame but its `nbytes` of value (sent after it, not copied)."""
    text = json.dumps(meta, separators=(",", ":")).encode()
    return HEADER.pack(VERSION, kind, 0, DSO_PREFIX.size + len(text) + nbytes) + DSO_PREFIX.pack(request, len(text)) + text


def decode_dso(body: bytes | bytearray | memoryview) -> tuple[int, dict[str, Any], memoryview]:
    """(request id, JSON object, value) of a DSO_CALL / DSO_REPLY body."""
    view = memoryview(body)
    if len(view) < DSO_PREFIX.size:
        raise ProtocolError("DSO frame without its request id")
    request, jlen = DSO_PREFIX.unpack_from(view)
    if jlen > MAX_DSO_JSON or DSO_PREFIX.size + jlen > len(view):
        raise ProtocolError("DSO frame with an invalid JSON length")
    try:
        meta = json.loads(bytes(view[DSO_PREFIX.size : DSO_PREFIX.size + jlen]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"DSO frame JSON is not valid: {exc}") from None
    except RecursionError:
        raise ProtocolError("DSO frame JSON is nested too deeply") from None
    if not isinstance(meta, dict):
        raise ProtocolError("DSO frame JSON must be an object")
    return request, meta, view[DSO_PREFIX.size + jlen :]
