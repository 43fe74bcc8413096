"""``MPI.Datatype``: the predefined types and the handle every datatype is used through.

A *record* (``TypeRecord``) is the datatype itself: its size, bounds, the numpy dtype of its elements, where its
bytes lie (``typemap``) and how it was made (combiner and contents). A ``Datatype`` is a handle on a record, as an
``MPI_Datatype`` is: ``MPI.Datatype(t)`` is another handle on t's record (equal, not identical), ``Free`` turns the
handle into ``DATATYPE_NULL`` and leaves the record to whoever else holds it (the types ``Get_contents`` hands out).

The predefined types are numpy dtypes with the names, typecodes and alignments MPICH gives them. The pair types
(DOUBLE_INT, ...) are numpy aligned structs, which is what MAXLOC and MINLOC reduce; their size is their extent
(MPICH: the size without the padding).
Constructors live in ``type_constructors``, Pack/Unpack in ``packing``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import exceptions as err
from . import typemap
from .handles import Handled
from .packing import TypePacking
from .type_constants import COMBINER_NAMES, COMBINER_NAMED, PREDEFINED_COMBINERS
from .type_constructors import TypeConstructors


class TypeRecord:
    """One datatype (see the module docstring); records are never changed after construction but for name and commit."""

    __slots__ = ("name", "dtype", "size", "lb", "ub", "true_lb", "true_ub", "align", "combiner", "contents",
                 "params", "base", "code", "typestr", "typechar", "handle", "committed", "predefined", "_build", "_pieces",
                 "_counted", "__weakref__")  # weak: what a Datatype's integer handle names (handles.py)

    def __init__(self, name: str, dtype: np.dtype | None, size: int, bounds: tuple[int, int, int, int], align: int,
                 combiner: int = COMBINER_NAMED, build: Callable[[], typemap.Pieces] | None = None) -> None:
        self.name = name
        self.dtype = dtype  # the elements' dtype when they all share one (reductions need it), else None
        self.size = size
        self.lb, self.ub, self.true_lb, self.true_ub = bounds
        self.align = align
        self.combiner = combiner
        self.contents: tuple[list[int], list[int], list[int], list[TypeRecord]] = ([], [], [], [])
        self.params: dict[str, Any] = {}  # what ``decode`` returns (records where it returns datatypes)
        self.base: TypeRecord | None = None
        self.code: str | None = None  # tocode(); None for derived types
        self.typestr = ""
        self.typechar = ""
        self.handle: Datatype | None = None  # the module-level handle of a predefined type
        self.predefined = self.committed = combiner in PREDEFINED_COMBINERS
        self._build = build
        self._pieces: typemap.Pieces | None = None
        self._counted: tuple[int, typemap.Plan] | None = None

    @property
    def extent(self) -> int:
        return self.ub - self.lb

    @property
    def pieces(self) -> typemap.Pieces:
        """Where one element's bytes lie (built on first use: most types made in tests never move data)."""
        if self._pieces is None:
            self._pieces = self._build() if self._build is not None else typemap.run(self.size)
        return self._pieces

    def layout(self, count: int) -> typemap.Plan:
        """How to move `count` consecutive elements (the last count asked for is kept: loops repeat it)."""
        counted = self._counted
        if counted is None or counted[0] != count:
            counted = self._counted = (count, typemap.plan(typemap.repeat(self.pieces, count, self.extent, self.size)))
        return counted[1]

    @property
    def contiguous(self) -> bool:
        """Elements are plain runs of `size` bytes, one after another (a message of them needs no copy)."""
        return self.ub - self.lb == self.size and self.lb == 0 and (
            self._build is None or self.pieces == typemap.run(self.size))


def _named(name: str, dtype: np.dtype | None, code: str | None = None, typechar: str | None = None) -> TypeRecord:
    if dtype is None:
        return TypeRecord("MPI_DATATYPE_NULL", None, 0, (0, 0, 0, 0), 0)
    size = dtype.itemsize
    record = TypeRecord(name, dtype, size, (0, size, 0, size), dtype.alignment)
    record.typestr = f"V{size}" if dtype.fields is not None else dtype.str[1:]
    record.typechar = "V" if dtype.fields is not None else typechar or dtype.char
    if dtype.fields is None:
        record.code = code or record.typechar
    return record


class Datatype(TypeConstructors, TypePacking, Handled):
    """Datatype: the layout of the elements of a message buffer."""
    __slots__ = ("_t", "__weakref__")

    def __init__(self, datatype: Datatype | None = None) -> None:
        if datatype is None:
            self._t = _NULL
        elif isinstance(datatype, Datatype):
            self._t = datatype._t
        else:
            raise TypeError(f"expecting an MPI.Datatype, not {type(datatype).__name__}")

    @classmethod
    def _of(cls, record: TypeRecord) -> Datatype:
        """A handle on `record`: a predefined type's own object, else a new handle."""
        if record.handle is not None:
            return record.handle
        handle = cls.__new__(cls)
        handle._t = record
        return handle

    # ------------------------------------------------------------ identity
    def _referent(self) -> TypeRecord:
        return self._t

    @classmethod
    def _from_referent(cls, record: TypeRecord) -> Datatype:
        return cls(Datatype._of(record))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Datatype) and other._t is self._t

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment] - unhashable, as mpi4py's handles

    def __bool__(self) -> bool:
        return self._t is not _NULL

    def __reduce__(self) -> Any:
        record = self._t
        if record.handle is self:
            key = _KEYS.get(id(record))
            return (_predefined, (key,)) if key else (from_dtype, (record.dtype,))
        if record.handle is not None or record is _NULL:  # another handle on it, of this handle's class
            return type(self), (Datatype._of(record),)
        base, combiner, params = self.decode()
        return _rebuild, (base, combiner, params, record.committed)

    def __repr__(self) -> str:
        return f"<fmpi.MPI.Datatype {self._t.name or self._t.typestr}>"

    @property
    def name(self) -> str:
        return self._t.name

    @name.setter
    def name(self, value: str) -> None:
        self.Set_name(value)

    @property
    def dtype(self) -> np.dtype | None:
        return self._t.dtype

    def Get_name(self) -> str:
        """\nReturn the datatype's name."""
        return self._t.name

    def Set_name(self, name: str) -> None:
        """\nSet the datatype's name."""
        self._live()
        self._t.name = str(name)

    def _live(self) -> TypeRecord:
        if self._t is _NULL:
            raise err.Exception(err.ERR_TYPE, "invalid datatype: MPI.DATATYPE_NULL")
        return self._t

    # ------------------------------------------------------------- extents
    def Get_size(self) -> int:
        """\nReturn the number of bytes of data an element of this type holds."""
        return self._t.size

    size = property(Get_size)

    def Get_extent(self) -> tuple[int, int]:
        """\nReturn (lower bound, extent) in bytes."""
        return self._t.lb, self._t.extent

    @property
    def extent(self) -> int:
        return self._t.extent
    @property
    def lb(self) -> int:
        return self._t.lb
    @property
    def ub(self) -> int:
        return self._t.ub

    def Get_true_extent(self) -> tuple[int, int]:
        """\nReturn (true lower bound, true extent) in bytes: the span of the data, without the bounds' markers."""
        return self._t.true_lb, self._t.true_ub - self._t.true_lb

    @property
    def true_extent(self) -> int:
        return self._t.true_ub - self._t.true_lb
    @property
    def true_lb(self) -> int:
        return self._t.true_lb
    @property
    def true_ub(self) -> int:
        return self._t.true_ub

    # ------------------------------------------------------ commit, free
    def Commit(self) -> Datatype:
        """\nCommit the datatype so communication may use it, and return it."""
        self._live().committed = True
        return self

    # ---------------------------------------------- what the type is made of
    def Get_envelope(self) -> tuple[int, int, int, int, int]:
        """\nReturn (number of ints, addresses, counts and datatypes, combiner) this type was made with."""
        record = self._live()
        ints, addresses, counts, types = record.contents
        return len(ints), len(addresses), len(counts), len(types), record.combiner

    envelope = property(Get_envelope)

    @property
    def combiner(self) -> int:
        return self._live().combiner

    @property
    def is_named(self) -> bool:
        return self._live().combiner == COMBINER_NAMED

    @property
    def is_predefined(self) -> bool:
        return self._t is _NULL or self._t.predefined

    def Get_contents(self) -> tuple[list[int], list[int], list[int], list[Datatype]]:
        """\nReturn the (ints, addresses, counts, datatypes) arguments this type was made with."""
        record = self._live()
        if record.combiner == COMBINER_NAMED:
            raise err.Exception(err.ERR_TYPE, f"{record.name} is a named datatype: it has no contents")
        ints, addresses, counts, types = record.contents
        return list(ints), list(addresses), list(counts), [Datatype._of(t) for t in types]

    contents = property(Get_contents)

    def decode(self) -> tuple[Datatype, str, dict[str, Any]]:
        """\nReturn (the type it was made from, the combiner's name, the constructor's arguments), as mpi4py's."""
        record = self._live()
        if record.combiner == COMBINER_NAMED:
            return self, "NAMED", {}
        params = {k: ([Datatype._of(t) for t in v] if k == "datatypes" else v) for k, v in record.params.items()}
        return Datatype._of(record.base or _NULL), COMBINER_NAMES[record.combiner], params

    # ------------------------------------------------------------ typecodes
    @classmethod
    def fromcode(cls, code: str) -> Datatype:
        """\nReturn the datatype of a buffer typecode ("i", "d", "f8", "c16", "B", ...), as mpi4py's."""
        found = _BY_CODE.get(code) if isinstance(code, str) else None
        if found is None:
            try:
                dtype = np.dtype(code)
            except TypeError:
                raise ValueError(f"cannot map typecode {code!r} to an MPI datatype") from None
            found = _BY_CODE.get(dtype.char)
            if found is None or found.dtype != dtype:
                raise ValueError(f"cannot map typecode {code!r} to an MPI datatype")
        return found

    def tocode(self) -> str:
        """\nReturn the buffer typecode of this datatype (ValueError if it has none)."""
        code = self._t.code
        if code is None:
            raise ValueError(f"{self._t.name or 'this datatype'} has no typecode")
        return code

    @property
    def typechar(self) -> str:
        return self._t.typechar

    @property
    def typestr(self) -> str:
        return self._t.typestr


def _predefined(key: str) -> Datatype:
    return DATATYPES[key]


def _rebuild(base: Datatype, combiner: str, params: dict[str, Any], committed: bool) -> Datatype:
    """A derived datatype made again from its decoded form (unpickling)."""
    if combiner == "DUP":
        made = base.Dup()
    else:
        made = getattr(base, "Create_" + combiner.lower())(**params)
    if committed:
        made.Commit()
    return made


_NULL = _named("MPI_DATATYPE_NULL", None)


def _pair(value: str, index: str = "i") -> np.dtype:
    return np.dtype([("v", value), ("i", index)], align=True)


# name: (numpy dtype, MPI name if not MPI_<key>, tocode if not the dtype's char, typechar if not the dtype's char)
_TABLE: dict[str, tuple] = {
    "PACKED": ("B",), "BYTE": ("B",), "AINT": ("q", None, "p", "p"), "OFFSET": ("q", None, "p", "p"),
    "COUNT": ("q", None, "p", "p"), "CHAR": ("S1", None, "c", "c"), "WCHAR": ("U1",), "SIGNED_CHAR": ("b",),
    "SHORT": ("h",), "INT": ("i",), "LONG": ("l",), "LONG_LONG": ("q", "MPI_LONG_LONG_INT"), "UNSIGNED_CHAR": ("B",),
    "UNSIGNED_SHORT": ("H",), "UNSIGNED": ("I",), "UNSIGNED_LONG": ("L",), "UNSIGNED_LONG_LONG": ("Q",),
    "FLOAT": ("f",), "DOUBLE": ("d",), "LONG_DOUBLE": ("g",), "C_BOOL": ("?", None, "b1"),
    "INT8_T": ("i1", None, "i1"), "INT16_T": ("i2", None, "i2"), "INT32_T": ("i4", None, "i4"),
    "INT64_T": ("i8", None, "i8"), "UINT8_T": ("u1", None, "u1"), "UINT16_T": ("u2", None, "u2"),
    "UINT32_T": ("u4", None, "u4"), "UINT64_T": ("u8", None, "u8"), "FLOAT16_T": ("e", "MPIX_C_FLOAT16"),
    "C_COMPLEX": ("F",), "C_DOUBLE_COMPLEX": ("D",), "C_LONG_DOUBLE_COMPLEX": ("G",),
    "CXX_BOOL": ("?",), "CXX_FLOAT_COMPLEX": ("F",), "CXX_DOUBLE_COMPLEX": ("D",), "CXX_LONG_DOUBLE_COMPLEX": ("G",),
    "CHARACTER": ("S1", None, "c", "c"), "LOGICAL": ("i",), "INTEGER": ("i",), "REAL": ("f",),
    "DOUBLE_PRECISION": ("d",), "COMPLEX": ("F",), "DOUBLE_COMPLEX": ("D",),
    "INTEGER1": ("i1", None, "i1"), "INTEGER2": ("i2", None, "i2"), "INTEGER4": ("i4", None, "i4"),
    "INTEGER8": ("i8", None, "i8"), "REAL4": ("f4", None, "f4"), "REAL8": ("f8", None, "f8"),
    "REAL16": ("g", None, "f16"), "COMPLEX8": ("c8", None, "c8"), "COMPLEX16": ("c16", None, "c16"),
    "COMPLEX32": ("G", None, "c32"),
    "SHORT_INT": (_pair("h"),), "TWOINT": (_pair("i"), "MPI_2INT"), "LONG_INT": (_pair("l"),),
    "FLOAT_INT": (_pair("f"),), "DOUBLE_INT": (_pair("d"),), "LONG_DOUBLE_INT": (_pair("g"),),
}

DATATYPES: dict[str, Datatype] = {"DATATYPE_NULL": Datatype()}
_NULL.handle = DATATYPES["DATATYPE_NULL"]
for _key, (_spec, *_rest) in _TABLE.items():
    _mpi_name, _code, _char = (*_rest, None, None, None)[:3]
    _record = _named(_mpi_name or "MPI_" + _key, np.dtype(_spec), _code, _char)
    DATATYPES[_key] = _record.handle = Datatype._of(_record)

# mpi4py's other names for types above (the same object, as they compare equal under MPICH), and
# the types MPICH lacks (DATATYPE_NULL there too).
for _name, _same in {"INT_INT": "TWOINT", "C_FLOAT_COMPLEX": "C_COMPLEX", "BOOL": "C_BOOL", "UNSIGNED_INT": "UNSIGNED",
                     "SIGNED_INT": "INT", "SIGNED_LONG": "LONG", "SIGNED_LONG_LONG": "LONG_LONG", "SIGNED_SHORT": "SHORT",
                     "SINT8_T": "INT8_T", "SINT16_T": "INT16_T", "SINT32_T": "INT32_T", "SINT64_T": "INT64_T",
                     "FLOAT32_T": "FLOAT", "FLOAT64_T": "DOUBLE", "F_BOOL": "LOGICAL", "F_INT": "INTEGER", "F_FLOAT": "REAL",
                     "F_DOUBLE": "DOUBLE_PRECISION", "F_COMPLEX": "COMPLEX", "F_FLOAT_COMPLEX": "COMPLEX",
                     "F_DOUBLE_COMPLEX": "DOUBLE_COMPLEX", "FLOAT32": "FLOAT", "FLOAT64": "DOUBLE", "COMPLEX64": "C_COMPLEX",
                     "COMPLEX128": "C_DOUBLE_COMPLEX", "BFLOAT16_T": "DATATYPE_NULL", "COMPLEX4": "DATATYPE_NULL",
                     "INTEGER16": "DATATYPE_NULL", "LOGICAL1": "DATATYPE_NULL", "LOGICAL2": "DATATYPE_NULL",
                     "LOGICAL4": "DATATYPE_NULL", "LOGICAL8": "DATATYPE_NULL", "LOGICAL16": "DATATYPE_NULL",
                     "REAL2": "DATATYPE_NULL"}.items():
    DATATYPES[_name] = DATATYPES[_same]
_KEYS = {id(h._t): k for k, h in reversed(DATATYPES.items())}  # a record's canonical key (its first name)

# A buffer without an explicit datatype is described by its typecode (numpy dtype char or
# memoryview format), as mpi4py does; typecodes name the types fromcode returns.
_BY_CHAR: dict[str, Datatype] = {}
for _key in ("BYTE", "SIGNED_CHAR", "SHORT", "INT", "LONG", "LONG_LONG", "UNSIGNED_SHORT", "UNSIGNED",
             "UNSIGNED_LONG", "UNSIGNED_LONG_LONG", "FLOAT", "DOUBLE", "LONG_DOUBLE", "C_BOOL", "C_COMPLEX",
             "C_DOUBLE_COMPLEX", "C_LONG_DOUBLE_COMPLEX", "CHAR", "FLOAT16_T", "WCHAR"):
    _BY_CHAR.setdefault(DATATYPES[_key].dtype.char, DATATYPES[_key])
_BY_CHAR["c"] = DATATYPES["CHAR"]
_BY_CODE = dict(_BY_CHAR)
for _key, _handle in DATATYPES.items():
    if _handle and _handle._t.code:
        _BY_CODE.setdefault(_handle._t.code, _handle)
_BY_DTYPE: dict[np.dtype, Datatype] = {}


def from_typechar(char: str) -> Datatype | None:
    return _BY_CHAR.get(char)


def from_dtype(dtype: np.dtype) -> Datatype:
    """The datatype of a numpy dtype; other dtypes travel as their own element type."""
    found = _BY_CHAR.get(dtype.char) if dtype.fields is None else None
    if found is not None and found.dtype == dtype:
        return found
    found = _BY_DTYPE.get(dtype)
    if found is None:
        record = _named(f"numpy:{dtype.str}", dtype)
        found = _BY_DTYPE[dtype] = record.handle = Datatype._of(record)
    return found


def record_of(datatype: Datatype) -> TypeRecord:
    return datatype._t


def handle_of(record: TypeRecord) -> Datatype:
    return Datatype._of(record)


def null_record() -> TypeRecord:
    return _NULL


def typecode(datatype: Datatype) -> str | None:
    """\nReturn a predefined type's buffer typecode, else None (mpi4py's ``MPI._typecode``)."""
    return datatype._t.code if datatype._t.predefined else None


def typealign(datatype: Datatype) -> int | None:
    """\nReturn a predefined type's alignment, else None (mpi4py's ``MPI._typealign``)."""
    return datatype._t.align if datatype._t.predefined and datatype else None
