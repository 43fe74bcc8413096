"""Memory exported through the CUDA array interface (``__cuda_array_interface__``), checked as mpi4py checks it.

mpi4py takes such objects as buffers and passes their data pointer to MPI, so the same is done here
(mpi4py's own test suite points them at host memory); the memory counts as a device's, not the CPU's,
for ``MPI.buffer``. Every key is checked with the error mpi4py raises: KeyError for a missing mandatory
key, TypeError for a value of the wrong type, ValueError for a malformed one, BufferError for memory
that cannot be used (masked, negative size, gaps, foreign byte order).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import numpy as np

from .dlpack import Exported, address_view, is_contiguous

_KINDS = "biufc"  # typestr kinds with a numpy (and MPI) element type; others are plain bytes
_NATIVE = "<" if sys.byteorder == "little" else ">"


def _typed(value: Any, kinds: type | tuple[type, ...], key: str) -> Any:
    if not isinstance(value, kinds):
        raise TypeError(f"__cuda_array_interface__: '{key}' must be {kinds}, not {type(value).__name__}")
    return value


def export(obj: Any) -> Exported:
    """The memory `obj` describes in its ``__cuda_array_interface__``."""
    iface = _typed(obj.__cuda_array_interface__, dict, "__cuda_array_interface__")
    data = _typed(iface["data"], tuple, "data")
    typestr = _typed(iface["typestr"], str, "typestr")
    shape = _typed(iface["shape"], tuple, "shape")
    strides = _typed(iface.get("strides"), (tuple, type(None)), "strides")
    descr = _typed(iface.get("descr"), (list, type(None)), "descr")
    pointer, readonly = data  # ValueError unless exactly two items, as in mpi4py
    size = int(np.prod(shape, dtype=np.int64))
    if pointer is None and size == 0:
        pointer = 0
    if not isinstance(pointer, int):
        raise TypeError(f"__cuda_array_interface__: data pointer must be an int, not {type(pointer).__name__}")
    order, kind, itemsize = typestr[0:1], typestr[1:2], int(typestr[2:])
    if order not in (_NATIVE, "|"):
        what = "unrecognized" if order not in "<>" else "non-native"
        raise BufferError(f"__cuda_array_interface__: typestr {typestr!r} with {what} byte order")
    if iface.get("mask") is not None:
        raise BufferError("__cuda_array_interface__: cannot handle masked arrays")
    if size < 0:
        raise BufferError(f"__cuda_array_interface__: buffer with negative size (shape:{shape}, size:{size})")
    if strides is not None and not (
        is_contiguous(shape, strides, itemsize) or is_contiguous(shape[::-1], strides[::-1], itemsize)
    ):
        raise BufferError(f"__cuda_array_interface__: buffer is not contiguous "
                          f"(shape:{shape}, strides:{strides}, itemsize:{itemsize})")
    if descr is not None and (len(descr) != 1 or descr[0] != ("", typestr)):
        warnings.warn("__cuda_array_interface__: ignoring 'descr' key", RuntimeWarning, stacklevel=3)
    dtype = np.dtype(f"{kind}{itemsize}") if kind in _KINDS and _has_dtype(kind, itemsize) else None
    return Exported(address_view(pointer, size * itemsize, bool(readonly), obj), dtype, False)


def _has_dtype(kind: str, itemsize: int) -> bool:
    try:
        np.dtype(f"{kind}{itemsize}")
    except TypeError:
        return False
    return True
