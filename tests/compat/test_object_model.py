"""The object model as mpi4py has it (issue 26, mpi4py's test_objmodel and test_handle): every MPI class has
``handle``/``fromhandle``, ``toint``/``fromint``, ``py2f``/``f2py`` leading back to an equal object of the
same class (``Comm.fromhandle`` to the communicator's own class: Cartcomm, Intracomm), and a read-only
``handle``; a Status's ``py2f``/``f2py`` (its Fortran integers); ``MPI._sizeof``/``_addressof``/``_handleof``;
``Op()`` and ``Cartcomm()`` are null handles; constructors refuse objects of another kind with TypeError;
objects take weak references and are unhashable (the registry of handles, api/handles.py, goes by id);
``free()`` leaves null and predefined objects alone and makes another handle on a predefined one null;
predefined objects unpickle to themselves, a user operation to a new one on its function, and a copy of a
handle of a subclass is of that subclass; BOTTOM, IN_PLACE and BUFFER_AUTOMATIC are MPICH's addresses as ints
(not a buffer: a Python class cannot export one whose ``memoryview(...).obj`` is None, as mpi4py's does). Compared with MPICH + mpi4py, except the handle numbers
themselves (MPICH's are its own).
"""

import pytest

pytestmark = pytest.mark.timeout(300)

OBJMODEL = r"""
import copy, os, pickle, weakref
from mpi4py import MPI
comm = MPI.COMM_WORLD
out = []
nulls = [MPI.DATATYPE_NULL, MPI.REQUEST_NULL, MPI.INFO_NULL, MPI.ERRHANDLER_NULL, MPI.SESSION_NULL, MPI.GROUP_NULL,
         MPI.WIN_NULL, MPI.OP_NULL, MPI.FILE_NULL, MPI.MESSAGE_NULL, MPI.COMM_NULL]
cart = comm.Create_cart([comm.size])
live = {"INT": MPI.INT, "vector": MPI.INT.Create_vector(2, 1, 2), "INFO_ENV": MPI.INFO_ENV, "info": MPI.Info.Create(),
        "GROUP_EMPTY": MPI.GROUP_EMPTY, "group": comm.Get_group(), "ERRORS_RETURN": MPI.ERRORS_RETURN, "SUM": MPI.SUM,
        "user op": MPI.Op.Create(lambda a, b, t: None), "COMM_WORLD": comm, "dup": comm.Dup(), "cart": cart,
        "win": MPI.Win.Create(MPI.BOTTOM, comm=MPI.COMM_SELF), "MESSAGE_NO_PROC": MPI.MESSAGE_NO_PROC}
for name, obj in [(type(o).__name__, o) for o in nulls] + list(live.items()):
    kind = type(obj)
    for to, back in (("handle", "fromhandle"), ("toint", "fromint"), ("py2f", "f2py")):
        number = obj.handle if to == "handle" else getattr(obj, to)()
        again = getattr(kind, back)(number)
        again2 = getattr(MPI.Comm if isinstance(obj, MPI.Comm) else kind, back)(number)
        out.append((name, to, number >= 0 if to == "handle" else "-", again == obj, type(again).__name__, type(again2).__name__, again.handle == obj.handle))
    out.append((name, "_handleof", MPI._handleof(obj) == obj.handle, MPI._sizeof(obj), MPI._sizeof(kind), MPI._addressof(obj) != 0))
    try:
        obj.handle = 5
        out.append((name, "handle read-only", "no"))
    except AttributeError:
        out.append((name, "handle read-only", "AttributeError"))
    out.append((name, "weakref", weakref.ref(obj)() is obj, kind() == kind(), bool(kind()), kind(obj) == obj))
    try:
        out.append((name, "hash", hash(obj) is not None))
    except TypeError:
        out.append((name, "hash", "TypeError"))
    for other in nulls + [1234, "abc"]:
        if not isinstance(other, kind):
            try:
                kind(other)
                out.append((name, "refuses", type(other).__name__, "no"))
            except TypeError:
                pass
out.append(("Status", MPI._sizeof(MPI.Status()), MPI._sizeof(MPI.Status), MPI._handleof(MPI.Status()) != 0))
st = MPI.Status()
st.source, st.tag, st.error = 3, 7, MPI.ERR_OTHER
st.Set_elements(MPI.BYTE, 2**33 + 5)
st.Set_cancelled(True)
out.append(("Status py2f", st.py2f(), MPI.Status.f2py(st.py2f()) == st, MPI.F_STATUS_SIZE))
for fn in (MPI._sizeof, MPI._addressof, MPI._handleof):
    try:
        fn(None)
        out.append((fn.__name__, "None", "no"))
    except TypeError:
        out.append((fn.__name__, "None", "TypeError"))
out.append(("Op()", MPI.Op() == MPI.OP_NULL, MPI.Op(MPI.SUM) == MPI.SUM, MPI.Op(MPI.SUM) != MPI.MAX))


def concat(a, b, datatype):
    return a + b


for commute in (True, False):
    user = MPI.Op.Create(concat, commute)
    again = pickle.loads(pickle.dumps(user))
    out.append(("user op pickled", again == user, again.Is_commutative(), again([1], [2])))
    user.Free()
    again.Free()
for obj in nulls + [MPI.INT, MPI.INFO_ENV, MPI.SUM, MPI.GROUP_EMPTY, MPI.ERRORS_RETURN, MPI.MESSAGE_NO_PROC, MPI.COMM_SELF, comm]:
    name = type(obj).__name__
    for _ in range(3):
        obj.free()
    clone = type(obj)(obj)
    clone.free()
    out.append((name, "safe free", bool(obj), bool(clone) if not isinstance(obj, MPI.Errhandler) else "-"))
    for protocol in (0, 2, 5):
        same = pickle.loads(pickle.dumps(obj, protocol))
        out.append((name, "pickle", protocol, same is obj))
    sub = type(f"My{name}", (type(obj),), {})
    globals()[sub.__name__] = sub
    dup = copy.deepcopy(sub(obj))
    out.append((name, "subclass copy", type(dup).__name__, dup == obj))
for const in (MPI.BOTTOM, MPI.IN_PLACE, MPI.BUFFER_AUTOMATIC):  # address constants: ints that do no arithmetic
    try:
        const + 1
        added = "added"
    except TypeError:
        added = "TypeError"
    out.append((repr(const), int(const), const == int(const), hash(const) == hash(int(const)), bool(const),
                type(const)() == const, pickle.loads(pickle.dumps(const)) is const, const != None, added))
out.append(("Get_address(BOTTOM)", MPI.Get_address(MPI.BOTTOM) == MPI.BOTTOM, MPI.BOTTOM == MPI.IN_PLACE))
live["win"].Free()
os.write(1, "".join(f"{comm.rank} {item!r}\n" for item in out).encode())
"""


@pytest.mark.parametrize("n", [1, 2])
def test_object_model_as_under_mpich(as_under_mpich, n):
    """Fails on the old code: Datatype, Comm, Group, ... had no ``handle``, MPI had no ``_sizeof``, ``MPI.Op()``
    was a TypeError, ``COMM_NULL.free()`` an MPI error."""
    as_under_mpich(OBJMODEL, n)
