"""Every ``FMPI_*`` environment variable: read once, checked, typed, documented in one table.

Modules never read ``os.environ`` for an ``FMPI_*`` setting; they ask
``settings.current()`` (the process's environment, read on first use) or take
a ``Settings`` made by ``read(env)`` (a rank spec, a test). A bad value is one
``ValueError`` naming the variable and what it accepts.

``VARIABLES`` is the table: ``fmpirun --help-env`` prints it and
docs/getting-started.md shows it (a docs test keeps the two in step). The
variables fmpirun itself sets for each rank (``FMPI_JOB``, ``FMPI_RANK``, ...)
are listed too, marked ``set by fmpirun``: they are the rank's ``RankSpec``
(rank/spec.py parses them), not tuning.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Mapping

CHANNELS = ("auto", "direct", "punch", "relay")
ERROR_HANDLERS = ("exception", "default", "fatal", "abort")
COLL_PREFIX = "FMPI_COLL_"
#: FMPI_NETWORK=lambda: one-way latency inside a region (0.15 ms) plus both ends' software, 620 Mbit/s sustained
#: per function, and numpy's float32 add on one vCPU (about 1 GB/s).
LAMBDA_NETWORK = (200e-6, 8 / 620e6, 1e-9)
#: The spin (microseconds) fmpirun gives yielding waits when ranks outnumber cores: several peers' turns on a core.
YIELD_SPIN_US = 1000


@dataclass(frozen=True)
class Variable:
    name: str
    default: str  # as the user would write it ("" = unset)
    doc: str
    set_by_fmpirun: bool = False
    # False: not copied into a Lambda rank's environment (the launcher's own settings; FMPI_TLS_CA, whose file
    # travels as its content; the deadline, which the handler sets).
    to_lambda: bool = True


VARIABLES: tuple[Variable, ...] = (
    # how links are made, and how long things may take
    Variable("FMPI_CHANNEL", "auto", "how links are made: auto (direct or punched where possible, relayed where not), "
             "direct, punch (never relay) or relay (every link through the relay)"),
    Variable("FMPI_PUNCH_TIMEOUT", "3", "seconds for one hole punch before the link falls back to the relay"),
    Variable("FMPI_DIRECT_TIMEOUT", "2", "seconds for one plain connect to a peer thought reachable"),
    Variable("FMPI_LINK_TIMEOUT", "5", "seconds of silence after which an established TCP link counts as dead"),
    Variable("FMPI_RESUME_TIMEOUT", "20", "seconds a peer has to answer a resume through the relay after a link failed"),
    Variable("FMPI_HEARTBEAT_TIMEOUT", "4", "seconds of silence from the relay after which a rank counts it as gone"),
    Variable("FMPI_RELAY_REJOIN", "30", "seconds a rank waits for a lost relay to come back (a restart); 0: give up at once"),
    Variable("FMPI_TIMEOUT", "", "seconds after which a blocking operation fails and every rank says what it waits "
             "for (hang diagnosis); unset: wait forever"),
    # waiting and shared memory
    Variable("FMPI_SPIN_US", "100", "microseconds a blocking wait polls before it sleeps (0: never; default 100 when "
             "the rank has a whole CPU, else 0)"),
    Variable("FMPI_SPIN_YIELD", "0", "1: yield the core between those polls (fmpirun sets it when ranks outnumber cores)"),
    Variable("FMPI_SHM", "1", "0: no shared-memory lanes between ranks on one host (TCP only)"),
    # flow control
    Variable("FMPI_EAGER_LIMIT", "1M", "bytes: a larger message is announced and moves only once its receive is "
             "posted (rendezvous), straight into the receive's buffer"),
    Variable("FMPI_UNEXPECTED_MAX", "128M", "bytes of messages that arrived before their receive a rank buffers at "
             "most, shared among its peers as credits; past a peer's share its messages wait for their receive"),
    # collectives
    Variable("FMPI_COLL_ALGO", "", "force collective algorithms, e.g. allreduce:ring,bcast:scatter_allgather "
             "(collectives/table.py lists them)"),
    Variable("FMPI_WIN_MEMORY", "local", "where the memory of Win.Create/Win.Allocate windows lives: local (the ranks') or "
             "relay (the fmpi-relay's shared objects; the Info key fmpi_memory chooses per window)"),
    Variable("FMPI_NETWORK", "lambda", "the network between the job's ranks, which the collectives table chooses "
             "algorithms for: lambda (a function per rank: 150 us one way plus software, 620 Mbit/s), host (ranks "
             "share one machine's cores; fmpirun sets it for local ranks) or alpha=US,bandwidth=MBIT[,reduce=GBPS]"),
    Variable("FMPI_COLL_<KNOB>", "", "move a threshold of the collectives table, in bytes (65536, 64K, 1M), e.g. "
             "FMPI_COLL_SEGMENT or FMPI_COLL_ALLREDUCE_RING_MIN"),
    # errors and limits
    Variable("FMPI_ERRORS", "exception", "what an MPI error does, as mpi4py.rc.errors: exception, default/fatal, abort"),
    Variable("FMPI_CHECKPOINT_URL", "", "where fmpi.checkpoint keeps each rank's state: file:///folder, s3://bucket/prefix "
             "or redis://host:port/db (fmpirun --max-runtime sets it; unset: checkpointing off)"),
    Variable("FMPI_CHECKPOINT_EVERY", "60", "seconds between checkpoints (0: at every checkpoint.save() call); one is "
             "also written whenever the time left is short"),
    Variable("FMPI_CHECKPOINT_MARGIN", "10", "seconds kept free before the platform's deadline: when less than this "
             "plus two iterations is left, checkpoint.save() writes one and stops the world to be launched again"),
    Variable("FMPI_DEADLINE", "", "epoch seconds of this rank's platform deadline (fmpi.remaining_time())", to_lambda=False),
    Variable("FMPI_TLS_CA", "", "PEM file of the CA that signed a tls:// relay's or rediss:// Redis's certificate "
             "(Lambda ranks get its content with their event)", to_lambda=False),
    Variable("FMPI_DEBUG_LINKS", "", "1: trace link set-up and failover on stderr"),
    Variable("FMPI_SHARD_RENDEZVOUS", "0", "1: with several fmpi-relays in the relay URL (tcp://a,b,c), fmpirun spreads "
             "the job's rendezvous over them (rank r registers at relay r mod k) instead of holding it on the first",
             to_lambda=False),
    Variable("FMPI_UNIVERSE_SIZE", "", "MPI.UNIVERSE_SIZE: how many processes the job may grow to with "
             "Comm.Spawn (MPIPoolExecutor() starts this minus the world size); unset: none, as under mpiexec"),
    # the Lambda backend (launcher side)
    Variable("FMPI_CACHE_DIR", "~/.cache/fmpi", "where fmpirun keeps built Lambda packages", to_lambda=False),
    Variable("FMPI_LAMBDA_ZIP_LIMIT", "52428800", "bytes: a larger package is deployed through S3 (may only be lowered)",
             to_lambda=False),
    Variable("FMPI_LAMBDA_SCALING", "1000/10", "how fast fmpirun starts Lambda ranks: at most STEP more every SECONDS "
             "(Lambda's scaling rule for one function: 1000 every 10 s)", to_lambda=False),
    Variable("FMPI_PRICES", "", "a JSON file of prices over the package's table, for the cost report of a Lambda job "
             "(what fmpirun --prices takes; docs/lambda.md)", to_lambda=False),
    Variable("FMPI_LAMBDA_UNZIPPED_LIMIT", "262144000", "bytes: Lambda's limit on an unzipped function (may only be lowered)",
             to_lambda=False),
    # what fmpirun gives each rank
    Variable("FMPI_JOB", "", "the job id", set_by_fmpirun=True),
    Variable("FMPI_RANK", "", "this rank's slot", set_by_fmpirun=True),
    Variable("FMPI_SIZE", "", "the number of ranks", set_by_fmpirun=True),
    Variable("FMPI_RELAY", "", "the relay URL", set_by_fmpirun=True),
    Variable("FMPI_TOKEN", "", "the job's secret (also what fmpirun --join reads)", set_by_fmpirun=True),
    Variable("FMPI_INCARNATION", "", "this start of the rank", set_by_fmpirun=True),
    Variable("FMPI_FILL_TIMEOUT", "", "seconds the world may take to fill", set_by_fmpirun=True),
    Variable("FMPI_REJOIN", "", "seconds to wait for a lost relay (0 when the relay lives in fmpirun)", set_by_fmpirun=True),
    Variable("FMPI_PARENTS", "", "a spawned rank's job: how many of its first slots are the parents (Comm.Spawn)",
             set_by_fmpirun=True),
    Variable("FMPI_SHARDED", "", "1: the job's rendezvous is spread over the relays of FMPI_RELAY (register at relay "
             "rank mod k)", set_by_fmpirun=True),
    Variable("FMPI_RANKS_PER_NODE", "1", "ranks that share a machine, in blocks of consecutive ranks (on Lambda: "
             "--ranks-per-function, set by the handler); above 1 allreduce, reduce and bcast go through one rank "
             "per block (collectives/*_hierarchical.py)", set_by_fmpirun=True),
    Variable("FMPI_NODE", "", "the machine a rank shares with others (on Lambda: its function instance); "
             "Split_type(COMM_TYPE_SHARED) and the hierarchical collectives group ranks by it (default: the host name)",
             set_by_fmpirun=True),
)


@dataclass(frozen=True)
class Settings:
    """The FMPI_* environment, parsed. Fields are None where the variable is unset and the default depends on
    where the rank runs (``spin``) or on who asks (``op_timeout``: wait forever)."""

    channel: str = "auto"
    punch_timeout: float = 3.0
    direct_timeout: float = 2.0
    link_timeout: float = 5.0
    resume_timeout: float = 20.0
    heartbeat_timeout: float = 4.0
    relay_rejoin: float = 30.0
    op_timeout: float | None = None
    spin: float | None = None  # seconds (FMPI_SPIN_US / 1e6); None: transport/spinning.default_spin decides
    spin_yield: bool = False
    shm: bool = True
    eager_limit: int = 1 << 20
    unexpected_max: int = 128 << 20
    coll_algo: str = ""
    win_memory: str = "local"  # FMPI_WIN_MEMORY: local or relay (api/win_relay.py)
    # (alpha s, beta s/byte, gamma s/byte) of the network between ranks; None: they share one host (FMPI_NETWORK)
    network: tuple[float, float, float] | None = LAMBDA_NETWORK
    coll_knobs: dict[str, int] = field(default_factory=dict)  # FMPI_COLL_SEGMENT=64K -> {"segment": 65536}
    errors: str | None = None
    deadline: float | None = None
    tls_ca: str | None = None
    debug_links: bool = False
    shard_rendezvous: bool = False  # FMPI_SHARD_RENDEZVOUS: spread a job's rendezvous over the URL's fmpi-relays
    universe_size: int | None = None
    cache_dir: str | None = None
    lambda_zip_limit: int | None = None
    lambda_unzipped_limit: int | None = None
    prices: str | None = None
    lambda_scaling: tuple[int, float] = (1000, 10.0)  # (STEP, SECONDS): FMPI_LAMBDA_SCALING
    ranks_per_node: int = 1  # FMPI_RANKS_PER_NODE: blocks of consecutive ranks that share a machine


def read(env: Mapping[str, str] | None = None) -> Settings:
    """Parse the FMPI_* variables of `env` (default: this process's environment)."""
    env = os.environ if env is None else env

    def raw(name: str) -> str:
        return env.get(name, "").strip()

    values: dict[str, object] = {}
    channel = raw("FMPI_CHANNEL").lower()
    if channel:
        if channel not in CHANNELS:
            raise ValueError(f"FMPI_CHANNEL must be one of {', '.join(CHANNELS)}, not {channel!r}")
        values["channel"] = channel
    for attr, name in (
        ("punch_timeout", "FMPI_PUNCH_TIMEOUT"), ("direct_timeout", "FMPI_DIRECT_TIMEOUT"),
        ("link_timeout", "FMPI_LINK_TIMEOUT"), ("resume_timeout", "FMPI_RESUME_TIMEOUT"),
        ("heartbeat_timeout", "FMPI_HEARTBEAT_TIMEOUT"), ("op_timeout", "FMPI_TIMEOUT"),
    ):
        if raw(name):
            values[attr] = seconds(name, raw(name), allow_zero=False)
    if raw("FMPI_RELAY_REJOIN"):
        values["relay_rejoin"] = seconds("FMPI_RELAY_REJOIN", raw("FMPI_RELAY_REJOIN"), allow_zero=True)
    if raw("FMPI_SPIN_US"):
        micros = _number("FMPI_SPIN_US", raw("FMPI_SPIN_US"), "a number of microseconds")
        if not micros >= 0:
            raise ValueError(f"FMPI_SPIN_US must be 0 or more microseconds, not {micros!r}")
        values["spin"] = micros * 1e-6
    if raw("FMPI_SPIN_YIELD"):
        values["spin_yield"] = _flag("FMPI_SPIN_YIELD", raw("FMPI_SPIN_YIELD"), "0 or 1 (yield the core between polls in a wait)")
    if raw("FMPI_SHM"):
        values["shm"] = _flag("FMPI_SHM", raw("FMPI_SHM"), "0 (no shared-memory lanes) or 1")
    if raw("FMPI_EAGER_LIMIT"):
        values["eager_limit"] = parse_bytes("FMPI_EAGER_LIMIT", raw("FMPI_EAGER_LIMIT"))
    if raw("FMPI_UNEXPECTED_MAX"):
        values["unexpected_max"] = parse_bytes("FMPI_UNEXPECTED_MAX", raw("FMPI_UNEXPECTED_MAX"))
    values["debug_links"] = bool(raw("FMPI_DEBUG_LINKS"))
    if raw("FMPI_SHARD_RENDEZVOUS"):
        values["shard_rendezvous"] = _flag("FMPI_SHARD_RENDEZVOUS", raw("FMPI_SHARD_RENDEZVOUS"),
                                           "0 (the rendezvous on the first relay) or 1 (spread over all)")
    if raw("FMPI_RANKS_PER_NODE"):
        values["ranks_per_node"] = _positive_int("FMPI_RANKS_PER_NODE", raw("FMPI_RANKS_PER_NODE"))
    if raw("FMPI_UNIVERSE_SIZE"):
        values["universe_size"] = _positive_int("FMPI_UNIVERSE_SIZE", raw("FMPI_UNIVERSE_SIZE"))
    values["coll_algo"] = raw("FMPI_COLL_ALGO")
    if raw("FMPI_WIN_MEMORY"):
        memory = raw("FMPI_WIN_MEMORY").lower()
        if memory not in ("local", "relay"):
            raise ValueError(f"FMPI_WIN_MEMORY must be local or relay, not {memory!r}")
        values["win_memory"] = memory
    if raw("FMPI_NETWORK"):
        values["network"] = network(raw("FMPI_NETWORK"))
    values["coll_knobs"] = {
        name[len(COLL_PREFIX):].lower(): parse_bytes(name, value)
        for name, value in env.items()
        if name.startswith(COLL_PREFIX) and name != "FMPI_COLL_ALGO" and value.strip()
    }
    errors = raw("FMPI_ERRORS")
    if errors:
        if errors not in ERROR_HANDLERS:
            raise ValueError(f"FMPI_ERRORS must be one of {', '.join(ERROR_HANDLERS)}, not {errors!r}")
        values["errors"] = errors
    values["deadline"] = deadline(env)
    values["tls_ca"] = tls_ca(env)
    values["cache_dir"] = raw("FMPI_CACHE_DIR") or None
    values["prices"] = raw("FMPI_PRICES") or None
    if raw("FMPI_LAMBDA_SCALING"):
        values["lambda_scaling"] = scaling(raw("FMPI_LAMBDA_SCALING"))
    for attr, name in (("lambda_zip_limit", "FMPI_LAMBDA_ZIP_LIMIT"), ("lambda_unzipped_limit", "FMPI_LAMBDA_UNZIPPED_LIMIT")):
        if raw(name):
            values[attr] = _positive_int(name, raw(name))
    return Settings(**values)  # type: ignore[arg-type]


def for_lambda_ranks(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The FMPI_* tuning variables of `env` that a Lambda rank gets in its event (it has no environment of ours)."""
    env = os.environ if env is None else env
    passed = {v.name for v in VARIABLES if v.to_lambda and not v.set_by_fmpirun and "<" not in v.name}
    return {
        name: value for name, value in sorted(env.items())
        if name in passed or (name.startswith(COLL_PREFIX) and value.strip())
    }


_current: Settings | None = None


def current() -> Settings:
    """This process's settings, read from the environment on first use."""
    global _current
    if _current is None:
        _current = read()
    return _current


def reload() -> Settings:
    """Read the environment again (after a test or a program changed it)."""
    global _current
    _current = None
    return current()


def deadline(env: Mapping[str, str] | None = None) -> float | None:
    """FMPI_DEADLINE as epoch seconds, read at each call: the Lambda handler moves it with every invocation."""
    text = (os.environ if env is None else env).get("FMPI_DEADLINE", "").strip()
    return _number("FMPI_DEADLINE", text, "epoch seconds") if text else None


@dataclass(frozen=True)
class Checkpointing:
    url: str | None
    every: float
    margin: float


def checkpointing(env: Mapping[str, str] | None = None) -> Checkpointing:
    """FMPI_CHECKPOINT_URL, _EVERY and _MARGIN, read at each call (a Lambda invocation brings its own)."""
    env = os.environ if env is None else env
    every = env.get("FMPI_CHECKPOINT_EVERY", "").strip()
    margin = env.get("FMPI_CHECKPOINT_MARGIN", "").strip()
    return Checkpointing(
        url=env.get("FMPI_CHECKPOINT_URL", "").strip() or None,
        every=seconds("FMPI_CHECKPOINT_EVERY", every, allow_zero=True) if every else 60.0,
        margin=seconds("FMPI_CHECKPOINT_MARGIN", margin, allow_zero=True) if margin else 10.0,
    )


def export(name: str, value: str) -> None:
    """Set a variable of the table in this process's environment, for the ranks fmpirun starts from it."""
    if name not in {v.name for v in VARIABLES}:
        raise KeyError(f"{name} is not an fmpi setting")
    os.environ[name] = value
    reload()


def tls_ca(env: Mapping[str, str] | None = None) -> str | None:
    """FMPI_TLS_CA, read at each connection (a program may set it before it connects)."""
    return (os.environ if env is None else env).get("FMPI_TLS_CA", "").strip() or None


def node(env: Mapping[str, str] | None = None) -> str | None:
    """FMPI_NODE, read when asked: the Lambda handler sets it per invocation (a warm process serves several)."""
    return (os.environ if env is None else env).get("FMPI_NODE", "").strip() or None


# ------------------------------------------------------------------ parsers
def network(text: str) -> tuple[float, float, float] | None:
    """FMPI_NETWORK: 'host' -> None, 'lambda' -> LAMBDA_NETWORK, 'alpha=US,bandwidth=MBIT[,reduce=GBPS]' -> its (α, β, γ)."""
    name = text.strip().lower()
    if name == "host":
        return None
    if name == "lambda":
        return LAMBDA_NETWORK
    fields = dict(item.partition("=")[::2] for item in name.split(","))
    usage = f"FMPI_NETWORK must be lambda, host or alpha=US,bandwidth=MBIT[,reduce=GBPS], not {text!r}"
    if not {"alpha", "bandwidth"} <= fields.keys() <= {"alpha", "bandwidth", "reduce"}:
        raise ValueError(usage)
    try:
        alpha, mbit = float(fields["alpha"]) * 1e-6, float(fields["bandwidth"])
        gbps = float(fields.get("reduce", 1 / LAMBDA_NETWORK[2] / 1e9))
    except ValueError:
        raise ValueError(usage) from None
    if not (alpha >= 0 and mbit > 0 and gbps > 0):
        raise ValueError(usage)
    return (alpha, 8 / (mbit * 1e6), 1 / (gbps * 1e9))


def scaling(text: str) -> tuple[int, float]:
    """FMPI_LAMBDA_SCALING: "STEP/SECONDS" -> (STEP, SECONDS)."""
    step, slash, period = text.partition("/")
    try:
        parsed = (int(step), float(period))
    except ValueError:
        parsed = (0, 0.0)
    if not slash or parsed[0] < 1 or not (0 < parsed[1] < math.inf):
        raise ValueError(f"FMPI_LAMBDA_SCALING must be STEP/SECONDS (e.g. 1000/10: 1000 more ranks every 10 s), not {text!r}")
    return parsed


def seconds(name: str, text: str, allow_zero: bool) -> float:
    value = _number(name, text, "a number of seconds")
    if value < 0 or (value == 0 and not allow_zero) or math.isnan(value):
        raise ValueError(f"{name} must be {'0 or more' if allow_zero else 'a positive number of'} seconds, not {text!r}")
    return value


def parse_bytes(name: str, text: str) -> int:
    """'65536', '64K', '64KiB', '1M', '1.5g' -> bytes."""
    units = (("kib", 1 << 10), ("mib", 1 << 20), ("gib", 1 << 30), ("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30), ("b", 1))
    cleaned = text.strip().lower()
    try:
        for suffix, scale in units:
            if cleaned.endswith(suffix):
                return int(float(cleaned[: -len(suffix)]) * scale)
        return int(cleaned)
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected a number of bytes such as 65536, 64K or 1M") from None


def _number(name: str, text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{name} must be {what}, not {text!r}") from None


def _flag(name: str, text: str, accepted: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError(f"{name} must be {accepted}, not {text!r}")
    return text == "1"


def _positive_int(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be a number of bytes, not {text!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive, not {value}")
    return value


def help_text() -> str:
    """The table as ``fmpirun --help-env`` prints it."""
    width = max(len(v.name) for v in VARIABLES)
    lines = ["Environment variables (read by every rank unless marked):", ""]
    for v in VARIABLES:
        default = " [set by fmpirun]" if v.set_by_fmpirun else (f" [default {v.default}]" if v.default else "")
        lines.append(f"  {v.name:<{width}}  {v.doc}{default}")
    return "\n".join(lines)
