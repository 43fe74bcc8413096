"""The one parser of relay URLs: which rendezvous backend a URL names, and the addresses in it.

    tcp://host:port[,host:port...]     fmpi-relay (several: the job on the first, shared objects on all;
                                       with FMPI_SHARD_RENDEZVOUS=1 the job's rendezvous spread over all)
    tls://host:port[,...]              the same over TLS
    redis[s]://[:password@]host[:port][/db]   Redis (one server, or a node of a Redis Cluster)
    memory://name                      an in-process rendezvous (tests; see memory.py)

Every other module asks ``parse`` (or the helpers below, which call it), so
a URL is checked once, by the same rules, with one kind of error
(ValueError) whose text never shows a password.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

FMPI_RELAY, REDIS, MEMORY = "fmpi-relay", "redis", "memory"
_KINDS = {"tcp": FMPI_RELAY, "tls": FMPI_RELAY, "redis": REDIS, "rediss": REDIS, "memory": MEMORY}
REDIS_PORT = 6379


@dataclass(frozen=True)
class RelayUrl:
    """A parsed relay URL. `addresses`: every host:port in it (one for Redis and memory://)."""

    url: str
    scheme: str
    addresses: tuple[tuple[str, int], ...]

    @property
    def kind(self) -> str:
        """FMPI_RELAY, REDIS or MEMORY: which rendezvous backend serves it."""
        return _KINDS[self.scheme]

    @property
    def tls(self) -> bool:
        return self.scheme in ("tls", "rediss")

    @property
    def first(self) -> tuple[str, int]:
        """The address that holds the job's rendezvous."""
        return self.addresses[0]

    @property
    def display(self) -> str:
        """The URL as it may be printed (a Redis password left out)."""
        return safe_url(self.url) if self.kind == REDIS else self.url


def parse(url: str) -> RelayUrl:
    """Check `url` and say what it names; ValueError (without any password) for anything else."""
    scheme = urlsplit(url.strip()).scheme if "://" in url else ""
    if scheme in ("redis", "rediss"):
        _check_redis(url)
        parts = urlsplit(url)
        return RelayUrl(url, scheme, ((parts.hostname or "localhost", parts.port or REDIS_PORT),))
    if scheme == "memory":
        name = url[len("memory://") :]
        if not name or "," in name:
            raise ValueError(f"in-process rendezvous URL {url!r} needs one name (memory://NAME)")
        return RelayUrl(url, scheme, ((name, 0),))
    if scheme not in ("tcp", "tls"):
        raise ValueError(
            f"unsupported relay URL {_without_password(url)!r}: expected tcp://host:port (fmpi-relay) or "
            "redis://[:password@]host:port/db (tls://host:port: fmpi-relay with TLS)"
            " (several fmpi-relays: tcp://a:7000,b:7000)"
        )
    return RelayUrl(url, scheme, tuple(_fmpi_relay_addresses(url, scheme)))


def relay_addresses(url: str) -> list[tuple[str, int]]:
    """'tcp://a:7000,b:7000' (or 'tcp://a:7000,tcp://b:7000') -> [(a, 7000), (b, 7000)]; one address is a list of one."""
    return list(parse(url).addresses)


def shard_urls(url: str) -> list[str]:
    """'tcp://a:7000,b:7000' -> ['tcp://a:7000', 'tcp://b:7000']: one URL per fmpi-relay of `url`, in order."""
    parsed = parse(url)
    return [f"{parsed.scheme}://[{h}]:{p}" if ":" in h else f"{parsed.scheme}://{h}:{p}" for h, p in parsed.addresses]


def parse_relay_url(url: str) -> tuple[str, int]:
    """'tcp://host:port' -> (host, port): the first relay of `url`, which holds the job's rendezvous."""
    return parse(url).first


def relay_scheme(url: str) -> str:
    """'tcp' or 'tls' (how the fmpi-relay at `url` is spoken to)."""
    return "tls" if url.strip().startswith("tls://") else "tcp"


def display_url(url: str) -> str:
    """`url` as it may be printed: a Redis password is left out (a malformed URL is shown without one too)."""
    try:
        return parse(url).display
    except ValueError:
        return _without_password(url)


def safe_url(url: str) -> str:
    """A Redis URL without its password, for messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port: int | str = parts.port or REDIS_PORT
    except ValueError:
        port = "?"
    return f"{parts.scheme}://{host}:{port}{parts.path}"


def with_address(url: str, host: str, port: int) -> str:
    """`url` pointed at host:port instead, with the same password, db and options (a Redis Cluster node)."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    hostport = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return parts._replace(netloc=f"{userinfo}@{hostport}" if userinfo else hostport).geturl()


def _without_password(url: str) -> str:
    """`url` with any user:password@ part replaced (a mistyped scheme must not print a password)."""
    return re.sub(r"//[^/@]*@", "//***@", url, count=1)


def _check_redis(url: str) -> None:
    parts = urlsplit(url)
    try:
        _ = parts.port  # (raises for a port that is not a number)
    except ValueError:
        raise ValueError(f"Redis URL {safe_url(url)!r} has an invalid port") from None
    db = parts.path.strip("/")
    if "," in parts.netloc:
        raise ValueError(f"Redis URL {safe_url(url)!r} names several servers: give one (a Redis Cluster node will do)")
    if not parts.hostname or (db and not db.isdigit()):
        raise ValueError(f"Redis URL {safe_url(url)!r} needs a host and an optional numeric db (redis://host:port/0)")


def _fmpi_relay_addresses(url: str, scheme: str) -> list[tuple[str, int]]:
    for part in url.split("://", 1)[1].split(","):  # (urllib's own words for a bad port name no URL)
        _, colon, port = part.partition("/")[0].rpartition(":")
        if colon and port and not (port.isdigit() and 0 < int(port) <= 65535):
            raise ValueError(f"relay URL {url!r}: the port must be a number 1-65535, not {port!r}")
    if "," not in url:
        return [_parse_one(url)]
    prefix = scheme + "://"
    out = []
    for part in url[len(prefix) :].split(","):
        part = part.strip()
        if not part:
            raise ValueError(f"relay URL {url!r} has an empty address")
        out.append(_parse_one(part if part.startswith(prefix) else prefix + part))
    if len(set(out)) != len(out):
        raise ValueError(f"relay addresses repeat in {url!r}")
    return out


def _parse_one(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.scheme not in ("tcp", "tls"):
        raise ValueError(f"unsupported relay URL {url!r}: expected tcp://host:port (or tls://host:port)")
    if not parts.hostname or parts.port is None:
        raise ValueError(f"relay URL {url!r} needs a host and a port ({parts.scheme or 'tcp'}://host:port)")
    return parts.hostname, parts.port
