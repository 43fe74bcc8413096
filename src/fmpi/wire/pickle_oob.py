"""Pickle for the lowercase (object) API, with large buffers sent out of band.

A plain pickle copies every numpy array inside an object into the pickle
stream. With protocol 5, contiguous buffers of at least ``OUT_OF_BAND_MIN``
bytes are instead sent as separate message parts straight from their memory,
and rebuilt on the receiver as views into the received payload: a dict of
large arrays crosses with no extra copy on either side.

Payload layout: u32 n, n x u64 buffer lengths, u64 pickle length, pickle, buffers.
``loads`` also takes an empty message (None) and a plain pickle, as mpi4py's ``recv`` does.

A program may replace pickle (mpi4py's ``MPI.pickle.__init__(dill.dumps, dill.loads)``):
``set_codec`` installs its object, whose ``dumps``/``loads`` then make and read the
(in-band only) pickle part of every payload.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

OUT_OF_BAND_MIN = 64 * 1024
_COUNT = struct.Struct("<I")
_LEN = struct.Struct("<Q")
_codec: Any = None  # an object with dumps(obj) -> bytes and loads(buffer) -> obj, or None: pickle protocol 5


def set_codec(codec: Any) -> None:
    """Serialize with `codec` from now on (None: the built-in pickle with out-of-band buffers)."""
    global _codec
    _codec = codec


def dumps(obj: Any) -> list[memoryview]:
    """Serialize `obj` into message parts (views; nothing is joined)."""
    if _codec is not None:
        data = memoryview(_codec.dumps(obj))
        return [memoryview(_COUNT.pack(0) + _LEN.pack(data.nbytes)), data]
    buffers: list[pickle.PickleBuffer] = []

    def keep_in_band(buf: pickle.PickleBuffer) -> bool:
        if buf.raw().nbytes < OUT_OF_BAND_MIN:
            return True
        buffers.append(buf)
        return False

    data = pickle.dumps(obj, protocol=5, buffer_callback=keep_in_band)
    raws = [b.raw() for b in buffers]
    head = _COUNT.pack(len(raws)) + b"".join(_LEN.pack(r.nbytes) for r in raws) + _LEN.pack(len(data))
    return [memoryview(head), memoryview(data), *raws]


def _framed(view: memoryview) -> bool:
    """Whether `view` is laid out as ``dumps`` makes payloads (the lengths add up to its size exactly)."""
    if len(view) < _COUNT.size + _LEN.size:
        return False
    (count,) = _COUNT.unpack_from(view, 0)
    head = _COUNT.size + (count + 1) * _LEN.size
    if head > len(view):
        return False
    lengths = struct.unpack_from(f"<{count + 1}Q", view, _COUNT.size)
    return head + sum(lengths) == len(view)


def loads(payload: bytes | bytearray | memoryview) -> Any:
    view = memoryview(payload)
    if not _framed(view):
        # A message some other way: an empty one is None, anything else a plain pickle (what
        # mpi4py programs send with ``Send(MPI.pickle.dumps(obj))`` and receive with ``recv``).
        if not len(view):
            return None
        return _codec.loads(view) if _codec is not None else pickle.loads(view)
    (count,) = _COUNT.unpack_from(view, 0)
    pos = _COUNT.size
    lengths = [_LEN.unpack_from(view, pos + i * _LEN.size)[0] for i in range(count)]
    pos += count * _LEN.size
    (plen,) = _LEN.unpack_from(view, pos)
    pos += _LEN.size
    data = view[pos : pos + plen]
    pos += plen
    buffers = []
    for n in lengths:
        buffers.append(view[pos : pos + n])
        pos += n
    if _codec is not None and not count:
        return _codec.loads(data)
    return pickle.loads(data, buffers=buffers)
