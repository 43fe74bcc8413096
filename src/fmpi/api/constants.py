"""MPI constants with the values MPICH (and so mpi4py on MPICH) gives them."""

from ..transport.matching import ANY_SOURCE, ANY_TAG

PROC_NULL = -1
ROOT = -3
UNDEFINED = -32766
TAG_UB = 2**29 - 1  # same bound MPICH reports; tags above it are rejected
MAX_PROCESSOR_NAME = 128
MAX_ERROR_STRING, MAX_OBJECT_NAME, MAX_LIBRARY_VERSION_STRING = 512, 128, 8192
MAX_PSET_NAME_LEN = MAX_STRINGTAG_LEN = 256
F_SOURCE, F_TAG, F_ERROR, F_STATUS_SIZE = 2, 3, 4, 5  # where a Fortran status keeps its fields (MPICH)

IDENT, CONGRUENT, SIMILAR, UNEQUAL = 0, 1, 2, 3
THREAD_SINGLE, THREAD_FUNNELED, THREAD_SERIALIZED, THREAD_MULTIPLE = 0, 1, 2, 3
COMM_TYPE_SHARED = 1
KEYVAL_INVALID = 0x24000000  # MPICH's
VERSION, SUBVERSION = 3, 1  # the MPI standard fmpi reports (MPI.Get_version)

# Keyvals of the attributes every communicator has (``comm.Get_attr``), MPICH's values. TAG_UB
# is both its own keyval and the bound, and Get_attr(TAG_UB) returns the bound, as under MPICH.
IO = 1681915909
WTIME_IS_GLOBAL = 1681915911
UNIVERSE_SIZE = 1681915913
LASTUSEDCODE = 1681915915
APPNUM = 1681915917


class Sentinel:
    """A named singleton such as MPI.IN_PLACE (compared by identity)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name

    __str__ = __repr__

    def __reduce__(self) -> str:
        return self._name


class AddressConstant(Sentinel):
    """A named singleton that stands for an address, as mpi4py's: ``int()`` is MPICH's value for it, it equals
    (and hashes as) that int, ``type(c)()`` gives it back, and it does no arithmetic."""

    __slots__ = ()
    _value = 0
    _instance = None

    def __new__(cls, name: "str | None" = None) -> "AddressConstant":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __init__(self, name: "str | None" = None) -> None:
        if name is not None:
            self._name = name

    def __int__(self) -> int:
        return self._value

    __index__ = __int__

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AddressConstant):
            return other is self
        return isinstance(other, int) and other == self._value

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self._value)


class InPlaceType(AddressConstant):
    """The type of IN_PLACE, as mpi4py names it."""

    _value = -1  # MPICH's (void *) -1
    _instance = None


class BottomType(AddressConstant):
    """The type of BOTTOM, as mpi4py names it."""

    _value = 0
    _instance = None


IN_PLACE = InPlaceType("IN_PLACE")
BOTTOM = BottomType("BOTTOM")

__all__ = [
    "ANY_SOURCE", "ANY_TAG", "PROC_NULL", "ROOT", "UNDEFINED", "TAG_UB", "MAX_PROCESSOR_NAME",
    "IDENT", "CONGRUENT", "SIMILAR", "UNEQUAL",
    "THREAD_SINGLE", "THREAD_FUNNELED", "THREAD_SERIALIZED", "THREAD_MULTIPLE",
    "COMM_TYPE_SHARED", "KEYVAL_INVALID", "IN_PLACE", "BOTTOM", "InPlaceType", "BottomType", "VERSION", "SUBVERSION",
    "IO", "WTIME_IS_GLOBAL", "UNIVERSE_SIZE", "LASTUSEDCODE", "APPNUM",
    "MAX_ERROR_STRING", "MAX_OBJECT_NAME", "MAX_LIBRARY_VERSION_STRING", "MAX_PSET_NAME_LEN", "MAX_STRINGTAG_LEN",
    "F_SOURCE", "F_TAG", "F_ERROR", "F_STATUS_SIZE",
]
