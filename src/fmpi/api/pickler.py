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
from .memory import buffer

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
        self.PROTOCOL = protocol
        self.THRESHOLD = threshold
        if self is globals().get("pickle"):
            pickle_oob.set_codec(None if self._default else self)

    @property
    def PROTOCOL(self) -> int | None:
        return self._protocol

    @PROTOCOL.setter
    def PROTOCOL(self, protocol: int | None) -> None:
        # As mpi4py: None is the highest protocol, or, with a dumps of one's own, none at all (dumps(obj) is
        # called without one); other values are kept as given (pickle reads a negative one as the highest).
        if protocol is None and self._dumps is _pickle.dumps:
            protocol = _pickle.HIGHEST_PROTOCOL
        self._protocol = protocol

    @property
    def THRESHOLD(self) -> int:
        return self._threshold

    @THRESHOLD.setter
    def THRESHOLD(self, threshold: int | None) -> None:
        self._threshold = THRESHOLD if threshold is None else int(threshold)

    def dumps(self, obj: Any) -> bytes:
        """
        Serialize `obj` to bytes with this pickler's dumps and PROTOCOL."""
        return self._dumps(obj) if self.PROTOCOL is None else self._dumps(obj, self.PROTOCOL)

    def loads(self, data: Any) -> Any:
        """
        Deserialize an object from `data`."""
        return self._loads(data)

    def dumps_oob(self, obj: Any) -> tuple[bytes, list[buffer]]:
        """
        Serialize `obj` with protocol 5 and return (data, out-of-band buffers).

        Out-of-band buffers need protocol 5, whatever PROTOCOL says, as in mpi4py; each buffer of THRESHOLD bytes or
        more is left out of the stream and returned as an ``MPI.buffer`` on its memory, not a copy."""
        buffers: list[buffer] = []

        def out_of_band(buf: _pickle.PickleBuffer) -> bool:
            raw = buf.raw()
            if raw.nbytes < self.THRESHOLD:
                return True
            made = buffer.frombuffer(raw)
            made._owner = raw.obj
            buffers.append(made)
            return False

        protocol = self.PROTOCOL if self.PROTOCOL is not None and self.PROTOCOL >= 5 else 5
        return self._dumps(obj, protocol, buffer_callback=out_of_band), buffers

    def loads_oob(self, data: Any, buffers: Iterable[Any]) -> Any:
        """
        Deserialize an object from `data` and its out-of-band `buffers`."""
        return self._loads(data, buffers=list(buffers))

    def __repr__(self) -> str:
        return f"<fmpi.MPI.Pickle protocol={self.PROTOCOL}>"


pickle = Pickle()
