"""What every DSO object shares: the error a refused call raises, the reply, argument checks."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from .store import Store

MAX_KEY = 1024
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


class DsoError(Exception):
    """A refused DSO call; ``code`` is what the client sees."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Reply:
    meta: dict[str, Any] = field(default_factory=dict)
    payload: bytes | memoryview | None = None


Result = Union[Reply, "asyncio.Future[Reply]"]


def arg(args: dict[str, Any], name: str, typ: type | tuple[type, ...], default: Any = ...) -> Any:
    if name not in args:
        if default is ...:
            raise DsoError("bad_request", f"missing argument {name!r}")
        return default
    value = args[name]
    if not isinstance(value, typ) or (isinstance(value, bool) and typ is not bool):
        raise DsoError("bad_request", f"argument {name!r} has the wrong type")
    return value




def resolve(fut: asyncio.Future, reply: Reply) -> None:
    if not fut.done():
        fut.set_result(reply)


class DsoObject:
    kind = "?"

    def __init__(self, store: "Store") -> None:
        self.store = store
        self.nbytes = 0  # value bytes held (charged to the job)

    def waiters(self) -> list[asyncio.Future]:
        return []
