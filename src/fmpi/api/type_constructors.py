"""Derived datatypes: ``Datatype.Create_*`` (mixed into ``Datatype``), with MPI's bounds and MPICH's contents.

Each constructor makes a ``TypeRecord``: its size, its bounds (lb/ub, and the
true ones, which only the data sets), the combiner with the contents and
arguments ``Get_contents``/``decode`` give back (in MPICH's large-count layout:
every count and displacement in ``counts``), and a function that builds the
layout from the old types' layouts (``typemap``) when data first moves.
Bounds follow MPI's rule: the least and greatest of every copy's bounds, a
struct's extent rounded up to the largest alignment of its members, as MPICH does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import TYPE_CHECKING, Any

from . import exceptions as err
from . import type_constants as tc
from . import typemap
from .keyvals import DatatypeAttributes

if TYPE_CHECKING:
    from .datatypes import Datatype, TypeRecord

_INT_MAX = 2**31 - 1
Bounds = tuple[int, int, int, int]  # lb, ub, true lb, true ub
_EMPTY: Bounds = (0, 0, 0, 0)


_datatypes = None


def _records():
    """The datatypes module (it imports this one, so it is looked up once, on first use)."""
    global _datatypes
    if _datatypes is None:
        from . import datatypes

        _datatypes = datatypes
    return _datatypes


def _repeated(b: Bounds, count: int, step: int) -> Bounds:
    """Bounds of `count` copies `step` bytes apart."""
    low, high = min(0, (count - 1) * step), max(0, (count - 1) * step)
    return b[0] + low, b[1] + high, b[2] + low, b[3] + high


def _union(parts: list[tuple[Bounds, bool]]) -> Bounds:
    """Bounds covering every part (bounds, has data); the true bounds only over parts with data."""
    if not parts:
        return _EMPTY
    data = [b for b, has_data in parts if has_data]
    true_lb, true_ub = (min(b[2] for b in data), max(b[3] for b in data)) if data else (0, 0)
    return min(b[0] for b, _ in parts), max(b[1] for b, _ in parts), true_lb, true_ub


def _bounds(t: TypeRecord) -> Bounds:
    return t.lb, t.ub, t.true_lb, t.true_ub


def _moved(b: Bounds, by: int) -> Bounds:
    return b[0] + by, b[1] + by, b[2] + by, b[3] + by


def _common_dtype(types: list[TypeRecord]):
    dtypes = {t.dtype for t in types if t.size}
    return dtypes.pop() if len(dtypes) == 1 else None


def _ints(values: Any, what: str) -> list[int]:
    try:
        return [int(v) for v in values]
    except TypeError:
        raise TypeError(f"{what} must be a sequence of integers") from None


def _check_count(*counts: int) -> None:
    if any(c < 0 for c in counts):
        raise err.Exception(err.ERR_COUNT, f"negative count in a datatype constructor: {counts}")


class TypeConstructors(DatatypeAttributes):
    """The constructors of derived datatypes (``Datatype`` inherits them)."""

    __slots__ = ()
    _t: TypeRecord

    def _derive(self, combiner: int, size: int, bounds: Bounds, parts: list[TypeRecord], build: Callable,
                contents: tuple[list, list, list, list], params: dict[str, Any], struct: bool = False) -> Datatype:
        dt = _records()
        align = max((t.align for t in parts), default=1)
        lb, ub, true_lb, true_ub = bounds
        if struct and align > 1 and (ub - lb) % align:
            ub += align - (ub - lb) % align  # MPICH pads a struct's extent to its members' alignment
        record = dt.TypeRecord("", _common_dtype(parts), size, (lb, ub, true_lb, true_ub), align, combiner, build)
        record.contents, record.params = contents, params
        record.base = parts[0] if len(parts) == 1 else None
        record.typestr, record.typechar = f"V{ub - lb}", "V"
        return dt.Datatype._of(record)

    def _old(self) -> TypeRecord:
        if not self:
            raise err.Exception(err.ERR_TYPE, "invalid datatype: MPI.DATATYPE_NULL")
        return self._t

    # ------------------------------------------------------------ simple ones
    def Dup(self) -> Datatype:
        old = self._old()
        new = self._derive(tc.COMBINER_DUP, old.size, _bounds(old), [old], lambda: old.pieces, ([], [], [], [old]), {})
        record = new._t
        record.align, record.committed = old.align, old.committed
        record.code, record.typestr, record.typechar = old.code, old.typestr, old.typechar
        return self._copy_attributes(new)

    def Free(self) -> None:
        """The handle becomes DATATYPE_NULL (its attributes' delete_fn run first); a predefined type is ERR_TYPE."""
        if self._old().predefined:
            raise err.Exception(err.ERR_TYPE, f"cannot free the predefined datatype {self._t.name}")
        self._delete_attributes()
        self._t = _records()._NULL

    def free(self) -> None:
        """Free unless null or predefined (mpi4py's lowercase form); another handle on a predefined
        type (``Datatype(MPI.INT)``) becomes null itself, the type and its module-level handle stay."""
        if self and not self._t.predefined:
            self.Free()
        elif self and self._t.handle is not self:
            self._t = _records()._NULL

    Create_dup = Dup

    def Create_contiguous(self, count: int) -> Datatype:
        old, count = self._old(), int(count)
        _check_count(count)
        if count > _INT_MAX:  # MPI 3.1 (what fmpi reports) has no large counts: MPICH 3 made this struct
            quotient = self.Create_vector(count // _INT_MAX, _INT_MAX, _INT_MAX)
            remainder = self.Create_contiguous(count % _INT_MAX)
            return self.Create_struct([1, 1], [0, (count // _INT_MAX) * _INT_MAX * old.extent], [quotient, remainder])
        bounds = _repeated(_bounds(old), count, old.extent) if count else _EMPTY
        return self._derive(tc.COMBINER_CONTIGUOUS, count * old.size, bounds, [old],
                            lambda: typemap.repeat(old.pieces, count, old.extent, old.size),
                            ([], [], [count], [old]), {"count": count})

    def Create_vector(self, count: int, blocklength: int, stride: int) -> Datatype:
        return self._vector(tc.COMBINER_VECTOR, int(count), int(blocklength), int(stride), self._old().extent)

    def Create_hvector(self, count: int, blocklength: int, stride: int) -> Datatype:
        return self._vector(tc.COMBINER_HVECTOR, int(count), int(blocklength), int(stride), 1)

    def _vector(self, combiner: int, count: int, blocklength: int, stride: int, unit: int) -> Datatype:
        old = self._old()
        _check_count(count, blocklength)
        step = stride * unit
        bounds = _EMPTY
        if count and blocklength:
            bounds = _repeated(_repeated(_bounds(old), blocklength, old.extent), count, step)

        def build() -> typemap.Pieces:
            block = typemap.repeat(old.pieces, blocklength, old.extent, old.size)
            return typemap.repeat(block, count, step, blocklength * old.size)

        return self._derive(combiner, count * blocklength * old.size, bounds, [old], build,
                            ([], [], [count, blocklength, stride], [old]),
                            {"count": count, "blocklength": blocklength, "stride": stride})

    def Create_resized(self, lb: int, extent: int) -> Datatype:
        old, lb, extent = self._old(), int(lb), int(extent)
        new = self._derive(tc.COMBINER_RESIZED, old.size, (lb, lb + extent, old.true_lb, old.true_ub), [old],
                           lambda: old.pieces, ([], [], [lb, extent], [old]), {"lb": lb, "extent": extent})
        new._t.align = old.align
        return new

    Resized = Create_resized

    # ---------------------------------------------------------------- indexed
    def Create_indexed(self, blocklengths: Sequence[int], displacements: Sequence[int]) -> Datatype:
        return self._indexed(tc.COMBINER_INDEXED, blocklengths, displacements, self._old().extent)

    def Create_hindexed(self, blocklengths: Sequence[int], displacements: Sequence[int]) -> Datatype:
        return self._indexed(tc.COMBINER_HINDEXED, blocklengths, displacements, 1)

    def Create_indexed_block(self, blocklength: int, displacements: Sequence[int]) -> Datatype:
        return self._indexed(tc.COMBINER_INDEXED_BLOCK, int(blocklength), displacements, self._old().extent)

    def Create_hindexed_block(self, blocklength: int, displacements: Sequence[int]) -> Datatype:
        return self._indexed(tc.COMBINER_HINDEXED_BLOCK, int(blocklength), displacements, 1)

    def _indexed(self, combiner: int, blocklengths: int | Sequence[int], displacements: Sequence[int], unit: int) -> Datatype:
        old = self._old()
        displs = _ints(displacements, "displacements")
        blocked = isinstance(blocklengths, int)
        lengths = [blocklengths] * len(displs) if blocked else _ints(blocklengths, "blocklengths")
        if len(lengths) != len(displs):
            raise ValueError(f"mismatch in blocklengths ({len(lengths)}) and displacements ({len(displs)})")
        _check_count(*lengths)
        return self._blocks(combiner, [old] * len(displs), lengths, [d * unit for d in displs],
                            [len(displs), *([blocklengths] if blocked else lengths), *displs],
                            {"blocklength" if blocked else "blocklengths": blocklengths if blocked else lengths,
                             "displacements": displs})

    def _blocks(self, combiner: int, types: list[TypeRecord], lengths: list[int], offsets: list[int],
                counts: list[int], params: dict[str, Any]) -> Datatype:
        """Blocks of `lengths[i]` copies of `types[i]` at byte `offsets[i]`: (h)indexed and struct."""
        parts = [(_moved(_repeated(_bounds(t), n, t.extent), d), t.size > 0) for t, n, d in zip(types, lengths, offsets) if n]

        def build() -> typemap.Pieces:
            return typemap.place([(typemap.repeat(t.pieces, n, t.extent, t.size), d, n * t.size)
                                  for t, n, d in zip(types, lengths, offsets)])

        struct = combiner == tc.COMBINER_STRUCT
        kinds = list(dict.fromkeys(types)) if struct else [self._old()]
        new = self._derive(combiner, sum(n * t.size for t, n in zip(types, lengths)), _union(parts), kinds or [self._old()],
                           build, ([], [], counts, types if struct else kinds), params, struct)
        if struct:  # decode's base type: the one datatype of a one-entry struct, else DATATYPE_NULL (as mpi4py)
            new._t.base = types[0] if len(types) == 1 else None
        return new

    @classmethod
    def Create_struct(cls, blocklengths: Sequence[int], displacements: Sequence[int], datatypes: Sequence[Datatype]) -> Datatype:
        lengths, displs, types = _ints(blocklengths, "blocklengths"), _ints(displacements, "displacements"), list(datatypes)
        if not len(lengths) == len(displs) == len(types):
            raise ValueError(f"mismatch in blocklengths ({len(lengths)}), displacements ({len(displs)}) "
                             f"and datatypes ({len(types)})")
        _check_count(*lengths)
        records = [t._old() for t in types]
        maker = types[0] if types else _records().DATATYPES["BYTE"]
        return maker._blocks(tc.COMBINER_STRUCT, records, lengths, displs, [len(lengths), *lengths, *displs],
                             {"blocklengths": lengths, "displacements": displs, "datatypes": records})

    # ---------------------------------------------------------------- arrays
    def Create_subarray(self, sizes: Sequence[int], subsizes: Sequence[int], starts: Sequence[int],
                        order: int = tc.ORDER_C) -> Datatype:
        self._old()  # (a null or freed base type raises here)
        sizes, subsizes, starts = _ints(sizes, "sizes"), _ints(subsizes, "subsizes"), _ints(starts, "starts")
        if not len(sizes) == len(subsizes) == len(starts) or order not in (tc.ORDER_C, tc.ORDER_F):
            raise err.Exception(err.ERR_ARG, f"invalid subarray: sizes {sizes}, subsizes {subsizes}, starts {starts}, order {order}")
        for n, sub, start in zip(sizes, subsizes, starts):
            if n < 1 or sub < 1 or start < 0 or start + sub > n:
                raise err.Exception(err.ERR_ARG, f"invalid subarray: sizes {sizes}, subsizes {subsizes}, starts {starts}")
        indices = [range(start, start + sub) for start, sub in zip(starts, subsizes)]
        return self._grid(tc.COMBINER_SUBARRAY, sizes, indices, order, [len(sizes), order], [*sizes, *subsizes, *starts],
                          {"sizes": sizes, "subsizes": subsizes, "starts": starts, "order": order})

    def Create_darray(self, size: int, rank: int, gsizes: Sequence[int], distribs: Sequence[int], dargs: Sequence[int],
                      psizes: Sequence[int], order: int = tc.ORDER_C) -> Datatype:
        gsizes, distribs, dargs, psizes = (_ints(v, n) for v, n in ((gsizes, "gsizes"), (distribs, "distribs"),
                                                                     (dargs, "dargs"), (psizes, "psizes")))
        if not len(gsizes) == len(distribs) == len(dargs) == len(psizes) or prod(psizes) != size or not 0 <= rank < size:
            raise err.Exception(err.ERR_ARG, f"invalid darray: size {size}, rank {rank}, gsizes {gsizes}, psizes {psizes}")
        coords, rest = [], rank
        for p in reversed(psizes):  # the process grid is row-major whatever the order
            coords.insert(0, rest % p)
            rest //= p
        indices = [_owned(g, dist, darg, p, c) for g, dist, darg, p, c in zip(gsizes, distribs, dargs, psizes, coords)]
        return self._grid(tc.COMBINER_DARRAY, gsizes, indices, order,
                          [size, rank, len(gsizes), *distribs, *dargs, *psizes, order], list(gsizes),
                          {"size": size, "rank": rank, "gsizes": gsizes, "distribs": distribs, "dargs": dargs,
                           "psizes": psizes, "order": order})

    def _grid(self, combiner: int, sizes: list[int], indices: list[Sequence[int]], order: int, ints: list[int],
              counts: list[int], params: dict[str, Any]) -> Datatype:
        """The elements of an array of `sizes` whose index along each axis is in `indices[axis]`."""
        old = self._old()
        axes = list(range(len(sizes)))
        if order == tc.ORDER_C:
            axes.reverse()  # innermost axis first
        steps, step = {}, old.extent
        for axis in axes:
            steps[axis] = step
            step *= sizes[axis]
        extent = step
        count = prod(len(ix) for ix in indices)
        true_lb = true_ub = 0
        if count and old.size:
            true_lb = old.true_lb + sum(min(ix) * steps[a] for a, ix in enumerate(indices))
            true_ub = old.true_ub + sum(max(ix) * steps[a] for a, ix in enumerate(indices))

        def build() -> typemap.Pieces:
            pieces, size = old.pieces, old.size
            for axis in axes:
                ix = indices[axis]
                if isinstance(ix, range):
                    pieces = typemap.place([(typemap.repeat(pieces, len(ix), steps[axis], size), ix.start * steps[axis],
                                             len(ix) * size)])
                else:
                    pieces = typemap.place([(pieces, i * steps[axis], size) for i in ix])
                size *= len(ix)
            return pieces

        return self._derive(combiner, count * old.size, (0, extent, true_lb, true_ub), [old], build,
                            (ints, [], counts, [old]), params)

    # ------------------------------------------- predefined kinds, by request
    @classmethod
    def Create_f90_integer(cls, r: int) -> Datatype:
        for key, digits in (("INT8_T", 2), ("INT16_T", 4), ("INT32_T", 9), ("INT64_T", 18)):
            if r <= digits:
                return _f90(key, tc.COMBINER_F90_INTEGER, [r], {"r": r})
        raise err.Exception(err.ERR_OTHER, f"no integer kind has {r} decimal digits")

    @classmethod
    def Create_f90_real(cls, p: int, r: int) -> Datatype:
        return _f90(_real_kind(p, r, ("FLOAT", "DOUBLE", "LONG_DOUBLE")), tc.COMBINER_F90_REAL, [p, r], {"p": p, "r": r})

    @classmethod
    def Create_f90_complex(cls, p: int, r: int) -> Datatype:
        key = _real_kind(p, r, ("C_COMPLEX", "C_DOUBLE_COMPLEX", "C_LONG_DOUBLE_COMPLEX"))
        return _f90(key, tc.COMBINER_F90_COMPLEX, [p, r], {"p": p, "r": r})

    @classmethod
    def Match_size(cls, typeclass: int, size: int) -> Datatype:
        prefix = {tc.TYPECLASS_INTEGER: "INTEGER", tc.TYPECLASS_REAL: "REAL", tc.TYPECLASS_COMPLEX: "COMPLEX"}.get(typeclass)
        found = _records().DATATYPES.get(f"{prefix}{size}") if prefix else None
        if typeclass == tc.TYPECLASS_LOGICAL and size == 4:
            found = _records().DATATYPES["LOGICAL"]
        if not found:
            raise err.Exception(err.ERR_ARG, f"no datatype of type class {typeclass} has {size} bytes")
        return found

    @classmethod
    def Get_value_index(cls, value: Datatype, index: Datatype) -> Datatype:
        """The predefined (value, index) pair type (MAXLOC/MINLOC), or DATATYPE_NULL if there is none."""
        types = _records().DATATYPES
        if not value or not index:
            raise err.Exception(err.ERR_TYPE, "invalid datatype: MPI.DATATYPE_NULL")
        pairs = {"SHORT": "SHORT_INT", "INT": "TWOINT", "LONG": "LONG_INT", "FLOAT": "FLOAT_INT", "DOUBLE": "DOUBLE_INT",
                 "LONG_DOUBLE": "LONG_DOUBLE_INT"}
        if index == types["INT"]:
            for key, pair in pairs.items():
                if value == types[key]:
                    return types[pair]
        return types["DATATYPE_NULL"]


def _owned(g: int, distrib: int, darg: int, p: int, coord: int) -> Sequence[int]:
    """The global indices along one axis that process coordinate `coord` of `p` owns (MPI_Type_create_darray)."""
    if distrib == tc.DISTRIBUTE_NONE:
        return range(g)
    if distrib == tc.DISTRIBUTE_BLOCK:
        block = -(-g // p) if darg == tc.DISTRIBUTE_DFLT_DARG else darg
        if block * p < g:
            raise err.Exception(err.ERR_ARG, f"darray: a block of {block} on {p} processes does not cover {g}")
        return range(min(coord * block, g), min((coord + 1) * block, g))
    if distrib == tc.DISTRIBUTE_CYCLIC:
        block = 1 if darg == tc.DISTRIBUTE_DFLT_DARG else darg
        return [i for start in range(coord * block, g, p * block) for i in range(start, min(start + block, g))]
    raise err.Exception(err.ERR_ARG, f"darray: unknown distribution {distrib}")


def _real_kind(p: int, r: int, keys: tuple[str, str, str]) -> str:
    if p <= 6 and r <= 37:
        return keys[0]
    if p <= 15 and r <= 307:
        return keys[1]
    if p <= 18 and r <= 4931:
        return keys[2]
    raise err.Exception(err.ERR_OTHER, f"no real kind has precision {p} and range {r}")


def _f90(key: str, combiner: int, ints: list[int], params: dict[str, Any]) -> Datatype:
    dt = _records()
    named = dt.DATATYPES[key]._t
    record = dt.TypeRecord("", named.dtype, named.size, _bounds(named), named.align, combiner)
    record.contents, record.params = (ints, [], [], []), params
    record.code, record.typestr, record.typechar = named.typestr, named.typestr, named.typechar
    return dt.Datatype._of(record)
