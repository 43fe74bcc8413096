"""MPI datatypes as thin names for numpy dtypes.

Every predefined datatype is contiguous, so a datatype here is just a numpy
dtype plus the MPI name users print. The pair types (DOUBLE_INT, ...) are
numpy structured dtypes laid out like their C structs, which is what MAXLOC
and MINLOC reduce.
"""

from __future__ import annotations

import numpy as np


class Datatype:
    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: np.dtype | None) -> None:
        self.name = name
        self.dtype = dtype

    def Get_size(self) -> int:
        return 0 if self.dtype is None else self.dtype.itemsize

    @property
    def size(self) -> int:
        return self.Get_size()

    def Get_extent(self) -> tuple[int, int]:
        return 0, self.Get_size()

    @property
    def extent(self) -> int:
        return self.Get_size()

    @property
    def lb(self) -> int:
        return 0

    @property
    def ub(self) -> int:
        return self.Get_size()

    def Get_name(self) -> str:
        return self.name

    def Dup(self) -> "Datatype":
        return Datatype(self.name, self.dtype)

    def Commit(self) -> "Datatype":
        return self

    def Free(self) -> None:
        pass

    @classmethod
    def fromcode(cls, code: str) -> "Datatype":
        """The datatype of a buffer typecode ("i", "d", "f8", "c16", "B", ...), as mpi4py's."""
        found = from_typechar(code) if isinstance(code, str) else None
        if found is None:
            try:
                dtype = np.dtype(code)
            except TypeError:
                raise ValueError(f"cannot map typecode {code!r} to an MPI datatype") from None
            found = from_typechar(dtype.char)
            if found is None or found.dtype != dtype:
                raise ValueError(f"cannot map typecode {code!r} to an MPI datatype")
        return found

    def tocode(self) -> str:
        if self.dtype is None or self.dtype.fields is not None:
            raise ValueError(f"{self.name} has no typecode")
        return self.dtype.char

    @property
    def typechar(self) -> str:
        return "" if self.dtype is None else self.dtype.char

    def __repr__(self) -> str:
        return f"<fmpi.MPI.Datatype {self.name}>"


def _pair(value: str, index: str = "i") -> np.dtype:
    return np.dtype([("v", value), ("i", index)], align=True)


_TABLE: dict[str, str | np.dtype | None] = {
    "DATATYPE_NULL": None,
    "PACKED": "B",
    "BYTE": "B",
    "AINT": "q",
    "OFFSET": "q",
    "COUNT": "q",
    "CHAR": "S1",
    "WCHAR": "U1",
    "SIGNED_CHAR": "b",
    "SHORT": "h",
    "INT": "i",
    "LONG": "l",
    "LONG_LONG": "q",
    "UNSIGNED_CHAR": "B",
    "UNSIGNED_SHORT": "H",
    "UNSIGNED": "I",
    "UNSIGNED_INT": "I",
    "UNSIGNED_LONG": "L",
    "UNSIGNED_LONG_LONG": "Q",
    "FLOAT": "f",
    "DOUBLE": "d",
    "LONG_DOUBLE": "g",
    "C_BOOL": "?",
    "BOOL": "?",
    "INT8_T": "i1",
    "INT16_T": "i2",
    "INT32_T": "i4",
    "INT64_T": "i8",
    "UINT8_T": "u1",
    "UINT16_T": "u2",
    "UINT32_T": "u4",
    "UINT64_T": "u8",
    "FLOAT32": "f4",
    "FLOAT64": "f8",
    "C_COMPLEX": "F",
    "C_FLOAT_COMPLEX": "F",
    "C_DOUBLE_COMPLEX": "D",
    "C_LONG_DOUBLE_COMPLEX": "G",
    "COMPLEX": "F",
    "DOUBLE_COMPLEX": "D",
    "COMPLEX64": "F",
    "COMPLEX128": "D",
    "REAL": "f",
    "DOUBLE_PRECISION": "d",
    "INTEGER": "i",
    "LOGICAL": "i",
    "REAL4": "f4",
    "REAL8": "f8",
    "INTEGER1": "i1",
    "INTEGER2": "i2",
    "INTEGER4": "i4",
    "INTEGER8": "i8",
    "SHORT_INT": _pair("h"),
    "TWOINT": _pair("i"),
    "INT_INT": _pair("i"),
    "LONG_INT": _pair("l"),
    "FLOAT_INT": _pair("f"),
    "DOUBLE_INT": _pair("d"),
    "LONG_DOUBLE_INT": _pair("g"),
}

DATATYPES: dict[str, Datatype] = {
    name: Datatype("MPI_" + name, None if spec is None else np.dtype(spec)) for name, spec in _TABLE.items()
}

# mpi4py's other names: MPICH's own further types, the names that stand for a type above (the same
# object, as they compare equal under MPICH), and those MPICH lacks (DATATYPE_NULL there too).
for _name, _spec in {"CHARACTER": "S1", "COMPLEX8": "c8", "COMPLEX16": "c16", "COMPLEX32": "G", "CXX_BOOL": "?",
                     "CXX_FLOAT_COMPLEX": "F", "CXX_DOUBLE_COMPLEX": "D", "CXX_LONG_DOUBLE_COMPLEX": "G",
                     "FLOAT16_T": "e", "REAL16": "g"}.items():
    DATATYPES[_name] = Datatype("MPI_" + _name, np.dtype(_spec))
for _name, _same in {"SIGNED_INT": "INT", "SIGNED_LONG": "LONG", "SIGNED_LONG_LONG": "LONG_LONG", "SIGNED_SHORT": "SHORT",
                     "SINT8_T": "INT8_T", "SINT16_T": "INT16_T", "SINT32_T": "INT32_T", "SINT64_T": "INT64_T",
                     "FLOAT32_T": "FLOAT", "FLOAT64_T": "DOUBLE", "F_BOOL": "LOGICAL", "F_INT": "INTEGER", "F_FLOAT": "REAL",
                     "F_DOUBLE": "DOUBLE_PRECISION", "F_COMPLEX": "COMPLEX", "F_FLOAT_COMPLEX": "COMPLEX",
                     "F_DOUBLE_COMPLEX": "DOUBLE_COMPLEX", "BFLOAT16_T": "DATATYPE_NULL", "COMPLEX4": "DATATYPE_NULL",
                     "INTEGER16": "DATATYPE_NULL", "LOGICAL1": "DATATYPE_NULL", "LOGICAL2": "DATATYPE_NULL",
                     "LOGICAL4": "DATATYPE_NULL", "LOGICAL8": "DATATYPE_NULL", "LOGICAL16": "DATATYPE_NULL",
                     "REAL2": "DATATYPE_NULL"}.items():
    DATATYPES[_name] = DATATYPES[_same]

# A buffer without an explicit datatype is described by its typecode (numpy
# dtype char or memoryview format), as mpi4py does.
_BY_CHAR: dict[str, Datatype] = {}
for _name in ("BYTE", "SIGNED_CHAR", "SHORT", "INT", "LONG", "LONG_LONG", "UNSIGNED_SHORT", "UNSIGNED",
              "UNSIGNED_LONG", "UNSIGNED_LONG_LONG", "FLOAT", "DOUBLE", "LONG_DOUBLE", "C_BOOL",
              "C_FLOAT_COMPLEX", "C_DOUBLE_COMPLEX", "C_LONG_DOUBLE_COMPLEX", "CHAR"):
    _BY_CHAR.setdefault(DATATYPES[_name].dtype.char, DATATYPES[_name])
_BY_CHAR["c"] = DATATYPES["CHAR"]
_BY_CHAR["e"] = Datatype("MPI_FLOAT16", np.dtype("e"))  # half floats travel as themselves


def from_typechar(char: str) -> Datatype | None:
    return _BY_CHAR.get(char)


def from_dtype(dtype: np.dtype) -> Datatype:
    """The datatype of a numpy dtype; other dtypes travel as their own element type."""
    found = _BY_CHAR.get(dtype.char) if dtype.fields is None else None
    return found if found is not None and found.dtype == dtype else Datatype(f"numpy:{dtype.str}", dtype)
