"""Memory exported through DLPack (``__dlpack__``), read and checked as mpi4py reads it.

Both capsule kinds are taken: "dltensor_versioned" (DLPack 1.x, asked for first, with the read-only
flag) and the older "dltensor". The capsule is not consumed: it is held for as long as the view of its
memory lives, so a producer's capsule destructor (not this code) frees the tensor, and a capsule that
is handed out twice stays usable, as under mpi4py. Memory on a device other than the CPU is taken too,
by its address, as mpi4py passes it to MPI; ``host`` says which it is.
"""

from __future__ import annotations

import ctypes
import operator
from typing import Any, NamedTuple

import numpy as np

_CPU = 1
_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
_INT, _UINT, _FLOAT, _COMPLEX, _BOOL = 0, 1, 2, 5, 6
_KINDS = {_INT: "i", _UINT: "u", _FLOAT: "f", _COMPLEX: "c"}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_uint), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):
    _fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter),
                ("flags", ctypes.c_uint64), ("dl_tensor", _Tensor)]


_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype, _is_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


class Exported(NamedTuple):
    """Memory another library exports: a flat byte view, its element type (None: plain bytes) and
    whether the CPU can touch it (mpi4py's ``buffer`` refuses to index device memory)."""

    view: memoryview
    dtype: np.dtype | None
    host: bool


def address_view(address: int, nbytes: int, readonly: bool, keep: object) -> memoryview:
    """A flat byte view of `nbytes` at `address` that keeps `keep` (the memory's owner) alive."""
    if nbytes == 0:
        return memoryview(b"" if readonly else bytearray())
    array = (ctypes.c_char * nbytes).from_address(address)
    array.owner = keep  # the view holds the ctypes array, the array holds the owner
    view = memoryview(array).cast("B")
    return view.toreadonly() if readonly else view


def export(obj: Any) -> Exported:
    """The memory `obj` exports through DLPack (BufferError, TypeError, ValueError as mpi4py raises them)."""
    device_type, device_id = obj.__dlpack_device__()
    device_type, device_id = operator.index(device_type), operator.index(device_id)  # None: TypeError
    host = device_type == _CPU
    stream = {} if host else {"stream": -1}  # mpi4py's: synchronize with the device before returning
    try:
        capsule = obj.__dlpack__(**stream, max_version=(1, 0), copy=False)
    except TypeError:  # a producer older than DLPack 1.0
        capsule = obj.__dlpack__(**stream)
    if _is_valid(capsule, b"dltensor_versioned"):
        managed = _ManagedVersioned.from_address(_get_pointer(capsule, b"dltensor_versioned"))
        if managed.version.major < 1:
            raise BufferError("dlpack: unexpected version")
        readonly = bool(managed.flags & _READ_ONLY)
    elif _is_valid(capsule, b"dltensor"):
        managed, readonly = _Managed.from_address(_get_pointer(capsule, b"dltensor")), False
    else:
        raise BufferError("dlpack: invalid capsule object")
    tensor = managed.dl_tensor
    shape = _checked_shape(tensor)
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    nbytes = int(np.prod(shape, dtype=np.int64)) * ((bits * lanes + 7) // 8)
    address = (tensor.data or 0) + tensor.byte_offset
    return Exported(address_view(address, nbytes, readonly, capsule), _dtype(code, bits, lanes), host)


def _checked_shape(tensor: _Tensor) -> list[int]:
    """The tensor's shape, after mpi4py's checks: sizes and strides not negative, C or Fortran order."""
    ndim = tensor.ndim
    if ndim < 0:
        raise BufferError("dlpack: number of dimensions is negative")
    if ndim > 0 and not tensor.shape:
        raise BufferError("dlpack: shape is NULL")
    shape = [tensor.shape[i] for i in range(ndim)]
    if any(n < 0 for n in shape):
        raise BufferError("dlpack: shape item is negative")
    if tensor.strides and ndim > 0:
        strides = [tensor.strides[i] for i in range(ndim)]
        if any(s < 0 for s in strides):
            raise BufferError("dlpack: strides item is negative")
        if not (is_contiguous(shape, strides, 1) or is_contiguous(shape[::-1], strides[::-1], 1)):
            raise BufferError("dlpack: buffer is not contiguous")
    return shape


def is_contiguous(shape: list[int] | tuple, strides: list[int] | tuple, itemsize: int) -> bool:
    """Whether `strides` (in units where an element is `itemsize`) lay `shape` out in row-major order;
    dimensions of length 0 or 1 constrain nothing."""
    step = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent > 1 and stride != step:
            return False
        step *= extent
    return True


def _dtype(code: int, bits: int, lanes: int) -> np.dtype | None:
    """The element type mpi4py infers (its buffer format); None where it infers bytes."""
    if lanes == 2 and code == _FLOAT and bits in (32, 64, 128):  # a complex number as two float lanes
        return np.dtype(f"c{bits // 4}")
    if lanes != 1:
        return None
    if code == _BOOL:
        return np.dtype("?") if bits == 8 else None
    if code not in _KINDS or bits % 8 or bits == 0:
        return None
    try:
        return np.dtype(f"{_KINDS[code]}{bits // 8}")
    except TypeError:
        return None  # a width numpy has no type of
