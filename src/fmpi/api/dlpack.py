"""Buffers exported through DLPack (``__dlpack__``), read as mpi4py reads them.

numpy's ``from_dlpack`` keeps the producer's tensor pointer after the capsule
that owns it may be gone, which producers built on ctypes (mpi4py's own test
suite) do not survive. Here the tensor is read while the capsule is held, its
deleter is called at once, and the memory is used through its address: the
exporting object owns it and the caller keeps that object alive for the call,
as MPI requires of every buffer.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from . import exceptions as err

_CPU = 1
_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}  # DLDataTypeCode -> numpy kind


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int), ("dtype", _DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.CFUNCTYPE(None, ctypes.c_void_p))]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_set_name = ctypes.pythonapi.PyCapsule_SetName
_set_name.restype, _set_name.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]


def host_view(obj: Any) -> tuple[memoryview, np.dtype]:
    """A flat writable byte view of the host memory `obj` exports through DLPack, and its dtype."""
    device_type = obj.__dlpack_device__()[0]
    if device_type != _CPU:
        raise err.Exception(err.ERR_BUFFER, f"{type(obj).__name__} is in device memory (DLPack device {device_type}); fmpi sends host memory")
    capsule = obj.__dlpack__()
    pointer = _get_pointer(capsule, b"dltensor")
    managed = _Managed.from_address(pointer)
    tensor = managed.dl_tensor
    try:
        kind, bits, lanes = _KINDS.get(tensor.dtype.code), tensor.dtype.bits, tensor.dtype.lanes
        if kind == "f" and lanes == 2:  # a complex number as two float lanes
            kind, bits, lanes = "c", 2 * bits, 1
        if kind is None or lanes != 1:
            raise err.Exception(err.ERR_TYPE, f"DLPack element type {tensor.dtype.code}/{bits}x{lanes} has no MPI datatype")
        dtype = np.dtype("?" if kind == "b" else f"{kind}{bits // 8}")
        shape = [tensor.shape[i] for i in range(tensor.ndim)]
        if tensor.strides and any(tensor.strides[i] != s for i, s in enumerate(_c_strides(shape))):
            raise err.UnusableBuffer("buffer is not C-contiguous")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        address = (tensor.data or 0) + tensor.byte_offset
        view = memoryview((ctypes.c_char * nbytes).from_address(address)).cast("B") if nbytes else memoryview(bytearray())
    finally:
        _set_name(capsule, b"used_dltensor")  # consumed: the capsule's destructor must not delete it again
        if managed.deleter:
            managed.deleter(pointer)
    return view, dtype


def _c_strides(shape: list[int]) -> list[int]:
    """Row-major strides in elements (only dimensions longer than 1 constrain them)."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return list(reversed(strides))
