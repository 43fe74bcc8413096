"""``MPI.Pickle`` and ``MPI.pickle``: the serializer of the lowercase (object) API, replaceable as in mpi4py.

``MPI.pickle.__init__(dill.dumps, dill.loads)`` (what schwimmbad's and mpipool's
``use_dill`` do) makes every later ``send``/``recv``/collective of objects use
dill. The default keeps fmpi's protocol-5 pickling with large buffers out of band
(fmpi.wire.pickle_oob); any other choice is installed there as its codec.
"""

from __future__ import annotations

import pickle as _pickle
from collections.abc import Callable, Iterable
from typing import Any

from ..wire import pickle_oob

THRESHOLD = 256 * 1024  # mpi4py's default: buffers from this size travel out of band


class Pickle:
    """Serializer with mpi4py's interface: ``dumps``/``loads``, ``PROTOCOL``, ``THRESHOLD``."""

    def __init__(
        self,
        dumps: Callable[..., bytes] | None = None,
        loads: Callable[[Any], Any] | None = None,
        protocol: int | None = None,
        threshold: int | None = None,
    ) -> None:
        self._default = dumps is None and loads is None and protocol in (None, -1, _pickle.HIGHEST_PROTOCOL)
        self._dumps = _pickle.dumps if dumps is None else dumps
        self._loads = _pickle.loads if loads is None else loads
        # As mpi4py: with a dumps of one's own and no protocol, dumps(obj) is called without one.
        if protocol is None:
            protocol = _pickle.HIGHEST_PROTOCOL if dumps is None else None
        elif protocol < 0:
            protocol = _pickle.HIGHEST_PROTOCOL
        self.PROTOCOL = protocol
        self.THRESHOLD = THRESHOLD if threshold is None else threshold
        if self is globals().get("pickle"):
            pickle_oob.set_codec(None if self._default else self)

    def dumps(self, obj: Any) -> bytes:
        return self._dumps(obj) if self.PROTOCOL is None else self._dumps(obj, self.PROTOCOL)

    def loads(self, data: Any) -> Any:
        return self._loads(data)

    def dumps_oob(self, obj: Any) -> tuple[bytes, list[memoryview]]:
        buffers: list[memoryview] = []
        if self.PROTOCOL is not None and self.PROTOCOL >= 5:
            def out_of_band(buf: _pickle.PickleBuffer) -> bool:
                if buf.raw().nbytes < self.THRESHOLD:
                    return True
                buffers.append(buf.raw())
                return False

            return self._dumps(obj, self.PROTOCOL, buffer_callback=out_of_band), buffers
        return self.dumps(obj), buffers

    def loads_oob(self, data: Any, buffers: Iterable[Any]) -> Any:
        return self._loads(data, buffers=list(buffers))

    def __repr__(self) -> str:
        return f"<fmpi.MPI.Pickle protocol={self.PROTOCOL}>"


pickle = Pickle()
