"""Connecting to the Redis a job uses: the rank's bound connection, Redis Cluster routing.

Redis Cluster: ``connect(url, job=J)`` asks the node in the URL ``INFO
cluster``; on a cluster it returns redis-py's ``RedisCluster`` client, which
routes each command to the master serving its slot (every key of a job
carries J's hash tag, so one master serves the whole job) and follows the
slot when it moves (resharding, failover): MOVED and ASK replies, a blocked
BLPOP redirected, scripts loaded again on the new master. The one client
that cannot be a cluster client is a rank's registration connection, made
from the rank's shared port (``source``) so Redis observes the port peers
punch to: it goes to the slot's master directly (``CLUSTER SLOTS``), is used
only until the world is out, and a MOVED reply on it becomes a clear error
(``explain``).

Deadlines: every connection's set-up (TCP connect, TLS handshake, AUTH/SELECT
and a PING) must finish within the connect timeout, so a server that accepts
and never answers, or a plain Redis behind rediss://, is one error, not a
hang; after set-up the connection waits without limit (BLPOP 0 blocks).
"""

from __future__ import annotations

import socket
import time
from typing import Any

from .. import settings
from ..wire.errors import RelayError
from .relay_connection import local_ip_towards
from .urls import parse, safe_url, with_address

DEFAULT_BULK_MAX = 512 << 20  # Redis' default proto-max-bulk-len: assumed where CONFIG is refused (ElastiCache)


def source_ip(url: str) -> str:
    """The local address this machine would use to reach the Redis server (no packet is sent)."""
    host, port = parse(url).first
    return local_ip_towards(host, port, f"Redis at {safe_url(url)}")


def _bound_connection_class(source: tuple[str, int], tls: bool = False):
    """A redis-py Connection that connects from `source` (a port shared with the rank's listener).

    Then the address Redis sees (CLIENT INFO) is the public mapping of the
    port peers punch to, as with fmpi-relay's OBSERVE. With `tls` (rediss://)
    the bound TCP connection is then wrapped in TLS by redis-py's own
    SSLConnection code, so the observed endpoint is still the punching port.
    """
    import redis

    from ..natpunch.sockets import bind_reusable

    class BoundConnection(redis.Connection):
        def _connect(self) -> socket.socket:
            sock = bind_reusable(*source)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(self.socket_connect_timeout)
                target = socket.getaddrinfo(self.host, self.port, sock.family, socket.SOCK_STREAM)[0][4]
                sock.connect(target)
                sock.settimeout(self.socket_timeout)
            except BaseException:
                sock.close()
                raise
            return sock

    if not tls:
        return BoundConnection

    class BoundSSLConnection(redis.SSLConnection):
        def _connect(self) -> socket.socket:
            sock = BoundConnection._connect(self)  # the bound TCP connect (it uses only connection settings)
            try:
                return self._wrap_socket_with_ssl(sock)
            except BaseException:
                sock.close()
                raise

    return BoundSSLConnection


def _deadline_class(base: type) -> type:
    """`base` (a redis-py Connection class) whose set-up ends within socket_connect_timeout, on every path.

    Set-up is the TCP connect, the TLS handshake, redis-py's AUTH/SELECT/HELLO
    and a PING (a server that accepted but is not Redis answers nothing, or
    not that). Why not redis-py's socket_timeout: it also bounds every later
    read, and the rendezvous BLPOPs without limit; here the socket's own
    timeout bounds the set-up, then goes back to socket_timeout (None). A first
    connect is not retried (each retry would start the wait over); a reconnect
    inside a command keeps redis-py's retries, each attempt bounded.
    """
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    class DeadlineConnection(base):  # type: ignore[misc, valid-type]
        _deadline: float | None = None

        def connect(self) -> None:
            retry, self.retry = self.retry, Retry(NoBackoff(), 0)
            try:
                super().connect()
            finally:
                self.retry = retry

        def _connect(self) -> socket.socket:
            limit = self.socket_connect_timeout
            self._deadline = None if limit is None else time.monotonic() + limit
            # (Connection._connect leaves the socket at socket_timeout: for now the limit, so the TLS handshake
            # and the set-up's replies wait no longer; the parser, made after this, keeps the steady value.)
            steady, self.socket_timeout = self.socket_timeout, limit
            try:
                return super()._connect()
            finally:
                self.socket_timeout = steady

        def _bounded(self, set_up: Any) -> None:
            self._sock.settimeout(self._left())
            set_up()
            self._sock.settimeout(self._left())
            self.send_command("PING")
            self.read_response()
            self._sock.settimeout(self.socket_timeout)
            self._deadline = None

        def _left(self) -> float | None:
            if self._deadline is None:
                return self.socket_connect_timeout
            return max(0.001, self._deadline - time.monotonic())

        if hasattr(base, "on_connect_check_health"):  # redis-py >= 6 connects through it, on_connect calls it

            def on_connect_check_health(self, check_health: bool = True) -> None:
                self._bounded(lambda: super(DeadlineConnection, self).on_connect_check_health(check_health))

        else:

            def on_connect(self) -> None:
                self._bounded(super().on_connect)

    DeadlineConnection.__name__ = f"Deadline{base.__name__}"
    return DeadlineConnection


def _scheme_hint(url: str, exc: BaseException) -> str:
    """Why a connection that reached a server may still fail: the usual one is the wrong scheme."""
    import redis

    text = str(exc)
    if parse(url).tls:
        if isinstance(exc, redis.TimeoutError) or "SSL" in text or "EOF" in text:
            return "; rediss:// speaks TLS: if this is a plain Redis, use redis://"
        return ""
    if "Protocol error" in text:
        return "; it does not speak the Redis protocol (an fmpi-relay is tcp://host:port)"
    if isinstance(exc, redis.TimeoutError):
        return "; is it a Redis server? (an fmpi-relay is tcp://host:port)"
    if "closed by server" in text or "reset by peer" in text:
        return "; if this Redis requires TLS, use rediss://"
    return ""


def bulk_limit(client: Any, where: str) -> int:
    """The server's proto-max-bulk-len: the longest string it accepts in a command (bytes).

    Managed services often refuse CONFIG (ElastiCache renames it, an ACL may
    deny it): then Redis' default, which they keep.
    """
    import redis

    try:
        return int(client.config_get("proto-max-bulk-len")["proto-max-bulk-len"])
    except (redis.ResponseError, KeyError, ValueError):
        return DEFAULT_BULK_MAX
    except redis.RedisError as exc:
        raise RelayError(f"lost Redis at {where}: {exc}", "lost") from None


_job_nodes: dict[tuple[str, str], tuple[str, bool]] = {}  # (url, job) -> (URL of the node serving the job, clustered)


def connect(url: str, timeout: float = 10.0, source: tuple[str, int] | None = None, job: str | None = None):
    """A redis-py client for `url` (redis:// or rediss://), with one clear error if unreachable.

    `source`: connect from this local address; such a client must be used
    by one thread at a time (a second connection from the same address to the
    same server is impossible). rediss:// verifies the server's certificate
    against the system's CAs, or against FMPI_TLS_CA when set (unless the
    URL says otherwise, e.g. ``?ssl_cert_reqs=none``).

    `job`: when `url` names a node of a Redis Cluster, the client is a
    ``RedisCluster`` (with `source`: a plain client of the master serving the
    slot of the job's keys). Whether it is a cluster is found once per
    process and job; on a plain server that costs one ``INFO cluster``.
    """
    if job is None:
        return _connect(url, timeout, source)
    known = _job_nodes.get((url, job))
    if known is None:
        client = _connect(url, timeout, source)
        try:
            known = _job_node(client, url, job)
        except BaseException:
            client.close()
            raise
        _job_nodes[(url, job)] = known
        # (a bound client already on the slot's master is kept: connecting again from the same port to the same
        # server can fail while the first connection's address pair waits out TIME_WAIT, "Cannot assign requested
        # address": seen in CI, 4 ranks whose URL named their job's master)
        if not known[1] or (source is not None and known[0] == url):
            return client
        client.close()
    node, clustered = known
    if not clustered:
        return _connect(url, timeout, source)
    if source is None:
        return _connect_cluster(url, timeout)
    return _connect(node, timeout, source)


def scan_slot(client: Any, pattern: str, key: str) -> list[bytes]:
    """The keys matching `pattern` that live with `key` (a job's keys share its slot): SCAN on a plain server; on a
    cluster, SCAN of the master serving `key`'s slot, read afresh (a resharding may have moved it since)."""
    if not is_cluster(client):
        return list(client.scan_iter(match=pattern, count=1000))
    refresh(client)
    return list(client.scan_iter(match=pattern, count=1000, target_nodes=client.get_node_from_key(key)))


def is_cluster(client: Any) -> bool:
    """Whether `client` is a Redis Cluster client (see ``connect``)."""
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)


def redirected(client: Any, exc: BaseException) -> bool:
    """Whether `exc` says a cluster's slot is moving (ASK, MOVED, TRYAGAIN): then the layout is read afresh, after a
    short pause, and the command may be sent again (none of these ran it)."""
    import redis

    if not (is_cluster(client) and isinstance(exc, (redis.exceptions.AskError, redis.exceptions.TryAgainError))):
        return False
    time.sleep(0.05)
    refresh(client)
    return True


def refresh(client: Any) -> None:
    """Read a cluster's layout afresh (which master serves which slot); nothing off a cluster."""
    if is_cluster(client):
        client.nodes_manager.initialize()


def on_cluster(url: str, job: str) -> bool:
    """Whether `url` turned out to be a Redis Cluster node when a client for `job` was made."""
    return _job_nodes.get((url, job), (url, False))[1]


def _job_node(client: Any, url: str, job: str) -> tuple[str, bool]:
    """(`url`, False) off a cluster; on a Redis Cluster (the URL of the master serving `job`'s slot, with the same
    password, db and options, True)."""
    import redis
    from redis.crc import key_slot

    try:
        enabled = int(client.info("cluster").get("cluster_enabled", 0))
    except redis.ResponseError:  # INFO renamed or not allowed: treat it as a plain server
        return url, False
    except redis.RedisError as exc:
        raise RelayError(f"cannot reach Redis at {safe_url(url)}: {exc}", "unreachable") from None
    if not enabled:
        return url, False
    slot = key_slot(f"{{{job}}}".encode())  # every key of the job carries this hash tag (redis_rendezvous)
    try:
        ranges = client.execute_command("CLUSTER SLOTS")
    except redis.RedisError as exc:
        raise RelayError(f"Redis at {safe_url(url)} is a cluster node but CLUSTER SLOTS failed: {exc}", "unavailable") from None
    if isinstance(ranges, dict):  # a redis-py that parses the reply: {(start, end): {"primary": (host, port), ...}}
        ranges = [(start, end, entry["primary"]) for (start, end), entry in ranges.items()]
    for start, end, master, *_replicas in ranges:
        if int(start) <= slot <= int(end):
            host = master[0].decode() if isinstance(master[0], bytes) else str(master[0])
            if host in ("", "?"):  # "the node you asked" / endpoint unknown
                host = parse(url).first[0]
            return with_address(url, host, int(master[1])), True
    raise RelayError(
        f"the Redis Cluster at {safe_url(url)} has no node serving slot {slot} (job {job!r}): is cluster_state ok?", "unavailable"
    )


def explain(exc: BaseException) -> str:
    """The text of a Redis error; a cluster redirection (the job's slot moved while it ran) in plain words."""
    import redis

    if isinstance(exc, redis.exceptions.AskError):  # MovedError is an AskError
        return (
            f"the job's Redis Cluster slot {exc.slot_id} moved to {exc.host}:{exc.port} while the rank registered "
            "(resharding or failover): run the job again"
        )
    return str(exc)


def _options(url: str, source: tuple[str, int] | None) -> dict[str, Any]:
    """redis-py's options for a connection to `url`: set-up deadlines, the bound port, FMPI_TLS_CA."""
    try:
        import redis
    except ImportError:
        raise RelayError("a redis:// relay needs redis-py: pip install 'fmpi[redis]'", "unavailable") from None
    tls = parse(url).tls  # (a bad URL: one clear ValueError)
    extra: dict[str, Any] = {"socket_timeout": None, "health_check_interval": 0}
    if source is not None:
        extra["connection_class"] = _deadline_class(_bound_connection_class(source, tls))
    else:
        extra["connection_class"] = _deadline_class(redis.SSLConnection if tls else redis.Connection)
    ca = settings.tls_ca()
    if tls and ca and "ssl_ca_certs=" not in url:
        extra["ssl_ca_certs"] = ca
    return extra


def _connect_cluster(url: str, timeout: float):
    """A ``RedisCluster`` client seeded with the node `url` names (which answered ``INFO`` a moment ago)."""
    import redis
    from redis.cluster import PRIMARY, ClusterNode, RedisCluster

    class FollowingCluster(RedisCluster):
        """redis-py's client, also redirected (ASK) to a master it has not met: one that served no slot until a
        resharding moves one to it, the usual way to add a node (redis-py 8.1 looks an ASK's target up in its
        cache only, finds nothing, and fails with an AttributeError; a MOVED adds the node, as done here)."""

        def get_node(self, host=None, port=None, node_name=None):
            node = super().get_node(host, port, node_name)
            if node is None and node_name:
                manager = self.nodes_manager
                host, _, port = node_name.rpartition(":")
                with manager._lock:
                    node = manager.nodes_cache.setdefault(node_name, ClusterNode(host, int(port), PRIMARY))
            return node

    try:
        return FollowingCluster.from_url(url, socket_connect_timeout=timeout, **_options(url, None))
    except redis.RedisError as exc:
        raise RelayError(f"cannot use the Redis Cluster at {safe_url(url)}: {exc}", "unavailable") from None


def _connect(url: str, timeout: float, source: tuple[str, int] | None):
    options = _options(url, source)
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=timeout, **options)
    tls = parse(url).tls
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        raise RelayError(f"Redis at {safe_url(url)} refused the password: {exc}", "auth") from None
    except redis.RedisError as exc:
        if isinstance(exc, redis.ResponseError) and "cluster mode" in str(exc):  # SELECT of a db other than 0
            raise RelayError(
                f"Redis at {safe_url(url)} is a Redis Cluster, which has only db 0: use {safe_url(url).rpartition('/')[0]}/0",
                "bad_url",
            ) from None
        if tls and "CERTIFICATE_VERIFY_FAILED" in str(exc):
            hint = "; its TLS certificate is not trusted: for a private CA set FMPI_TLS_CA=/path/to/ca.pem"
        else:
            hint = _scheme_hint(url, exc)
        if isinstance(exc, redis.TimeoutError):
            raise RelayError(f"Redis at {safe_url(url)} did not answer within {timeout:g} s{hint}", "unreachable") from None
        raise RelayError(f"cannot reach Redis at {safe_url(url)}: {exc}{hint}", "unreachable") from None
    return client
