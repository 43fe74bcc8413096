"""Message specs and ``MPI.buffer`` as mpi4py has them (issue 26, mpi4py's test_msgspec and test_buffer):
``(count, None)``, ``(None, displ)`` and ``[buf, count, None, None]`` forms, mpi4py's errors for bad specs
(ValueError, KeyError, TypeError, BufferError), Fortran-ordered arrays, non-native byte order; and
``MPI.buffer`` over foreign memory (``buffer(obj)``, ``frombuffer``, ``fromaddress``, ``toreadonly``,
``cast``, item and slice rules, ``release``, ``Alloc_mem``/``Free_mem``); vector counts (numpy 0-d and array counts, float counts refused), w-spec defaults and refusals, RMA target specs. Compared with MPICH + mpi4py.
"""

import pytest
from tests_support import OUTCOMES_PRELUDE

pytestmark = pytest.mark.timeout(300)

PRELUDE = OUTCOMES_PRELUDE

SPECS = PRELUDE + r"""
def exchange(send, recv):
    comm.Sendrecv(send, peer, 4, recv, source, 4)

send = array.array("i", range(10 * comm.rank, 10 * comm.rank + 6))
for sspec, rspec in (((3, None), (3, None)), ((None, 2), (None, 2)), ((2, 1), (2, 4))):
    recv = array.array("i", [0] * 6)
    exchange([send, sspec], [recv, rspec])
    exchange([send, sspec, "i"], [recv, rspec, MPI.INT])
    out.append((sspec, rspec, recv.tolist()))
recv = array.array("i", [0] * 6)
exchange([send, 2, None, None], [recv, 2, None, None])
out.append(("None displ and type", recv.tolist()))
fortran = np.asfortranarray(np.arange(6.0).reshape(2, 3) + comm.rank)
got = np.zeros((2, 3), order="F")
exchange(fortran, got)
out.append(("fortran", got.tolist()))
swapped = np.arange(3, dtype=np.dtype("i").newbyteorder())
outcome("non-native order", lambda: exchange(swapped, np.zeros(3, swapped.dtype)))
outcome("non-native order, typed", lambda: exchange([swapped, MPI.INT], [np.zeros(3, "i"), MPI.INT]))
buf, empty = MPI.Alloc_mem(5), [None, 0, "B"]
for spec in ([buf, 0, 0, "i", None], [buf, 0, "\0"], [buf, -1, "i"], [buf, 0, -1, "i"], [buf, 0, 2, "i"],
             [None, 1, 0, "i"], [buf, None, 0, "i"], [buf, 0, 1, MPI.DATATYPE_NULL],
             [buf, None, 0, MPI.DATATYPE_NULL], [[1, 2, 3, 4], 4, 0, "i"], object, [MPI.BOTTOM, 0, "B"]):
    outcome(f"bad spec {len(out)}", lambda: MPI.COMM_SELF.Sendrecv(spec, 0, 0, empty, 0, 0))
outcome("receive into bytes", lambda: MPI.COMM_SELF.Sendrecv(b"abc", 0, 0, b"abc", 0, 0))
MPI.Free_mem(buf)
os.write(1, "".join(f"{comm.rank} {item!r}\n" for item in out).encode())
"""

BUFFER = PRELUDE + r"""
def describe(mem):
    return (type(mem).__name__, mem.address != 0, mem.nbytes, mem.readonly, mem.format, mem.itemsize, len(mem))

empty = MPI.buffer()
out.append(("empty", describe(empty), memoryview(empty).tobytes()))
for obj in (b"abc", bytearray(b"abc"), array.array("i", [1, 2, 3])):
    mem = MPI.buffer(obj)
    view = memoryview(mem)
    out.append(("buffer", describe(mem), mem.obj == obj, view.format, view.shape, view.readonly, view.tobytes()))
for bad in (None, 0, 0.0, [], ()):
    outcome(f"buffer({bad!r})", lambda: MPI.buffer(bad))
    outcome(f"frombuffer({bad!r})", lambda: MPI.buffer.frombuffer(bad))
outcome("bytes[:] = 0", lambda: MPI.buffer(b"abc").__setitem__(slice(None), 0))
outcome("wrong size", lambda: MPI.buffer(bytearray(3)).__setitem__(slice(0, 1), b"xy"))
obj = array.array("B", [1, 2, 3])
for mem in (MPI.buffer.frombuffer(obj), MPI.buffer.fromaddress(obj.buffer_info()[0], 3)):
    mem[:] = 1
    mem[1:] = array.array("B", [7, 7])
    mem[2] = 9
    out.append(("written", obj.tolist(), mem[1:3].tobytes(), mem.cast("B").tolist(), mem.address == obj.buffer_info()[0]))
    mem.release()
    out.append(("released", mem.address, mem.nbytes, mem.readonly))
frozen = MPI.buffer.frombuffer(bytearray(b"abc")).toreadonly()
out.append(("toreadonly", describe(frozen)))
outcome("fromaddress negative", lambda: MPI.buffer.fromaddress(obj.buffer_info()[0], -1))
outcome("fromaddress NULL", lambda: MPI.buffer.fromaddress(0, 1))
outcome("allocate None", lambda: MPI.buffer.allocate(None))
outcome("allocate -1", lambda: MPI.buffer.allocate(-1))
for size in (0, 1, 24):
    mem = MPI.buffer.allocate(size, True)
    out.append(("allocate", size, describe(mem), memoryview(mem.obj).nbytes, mem.tobytes()))
mem = MPI.buffer.allocate(24)
mem.cast("i")[:] = array.array("i", range(6))
out.append(("cast", mem.cast("i", (2, 3)).tolist(), mem.cast("i", (3, 2)).tolist()))
mem = MPI.Alloc_mem(16)
for name, call in (("del", lambda: mem.__delitem__(16)), ("get 16", lambda: mem[16]), ("get ::2", lambda: mem[::2]),
                   ("get None", lambda: mem[None]), ("set 16", lambda: mem.__setitem__(16, 0)),
                   ("set ::2", lambda: mem.__setitem__(slice(None, None, 2), 0)),
                   ("set None", lambda: mem.__setitem__(None, 0))):
    outcome(name, call)
for i in range(-16, 0):
    mem[i] = abs(i)
mem[1:5] = b"abcd"
out.append(("items", [mem[i] for i in range(16)], type(mem[0]).__name__, mem[1:5].tobytes()))
MPI.Free_mem(mem)
out.append(("freed", mem.address, mem.nbytes, mem.readonly))
outcome("attach read-only", lambda: MPI.Attach_buffer(MPI.buffer(b"abc")))
os.write(1, "".join(f"{comm.rank} {item!r}\n" for item in out).encode())
"""


COUNTS = PRELUDE + r"""
size = comm.size
send = bytearray(b"x" + bytes(range(97, 97 + 3 * size)))
recv = bytearray(3 * size + 1)
comm.Alltoallv([send, (3, [np.array(1) + 3 * i for i in range(size)])], [recv, np.array(3)])
out.append(("0-d counts", bytes(recv)))
recv = bytearray(3 * size + 1)
comm.Alltoallv([send, np.array([3] * size)], [recv, (3, np.array([1] * size) * 0 + np.arange(size) * 3)])
out.append(("array counts", bytes(recv)))
for label, counts in (("float array", np.array([3.1] * size)), ("0-d float", np.array(3.0)), ("float list", [3.0] * size)):
    outcome(label, lambda: comm.Alltoallv([send, counts], [bytearray(3 * size + 1), counts]))
wsend, wrecv = bytearray(b"abc" * size), bytearray(3 * size)
comm.Alltoallw([wsend, None, None, [MPI.CHAR] * size], [wrecv, [MPI.CHAR] * size])
out.append(("w defaults", bytes(wrecv)))
for label, spec in (("w one item", [wsend]), ("w BOTTOM no counts", [MPI.BOTTOM, None, [0] * size, [MPI.BYTE] * size]),
                    ("w BOTTOM no displs", [MPI.BOTTOM, [0] * size, None, [MPI.BYTE] * size]),
                    ("w five items", [wsend, [0] * size, [0] * size, [MPI.BYTE] * size, None])):
    outcome(label, lambda: comm.Alltoallw(spec, [wrecv, [0] * size, [0] * size, [MPI.BYTE] * size]))
win = MPI.Win.Allocate(8, 1, comm=MPI.COMM_SELF)
for label, target in (("target dict", {1: 2}), ("target 4 items", (0, 1, MPI.BYTE, None)), ("target ()", ()),
                      ("target 0", 0), ("target [0, 1, BYTE]", [0, 1, MPI.BYTE])):
    win.Lock(0)
    outcome(label, lambda: win.Put(bytearray(b"z"), 0, target))
    win.Unlock(0)
win.Free()
os.write(1, "".join(f"{comm.rank} {item!r}\n" for item in out).encode())
"""


@pytest.mark.parametrize(("name", "source", "n"), [("specs", SPECS, 1), ("specs", SPECS, 2), ("buffer", BUFFER, 1),
                                                  ("counts", COUNTS, 1), ("counts", COUNTS, 3)])
def test_message_specs_as_under_mpich(as_under_mpich, name, source, n):
    """Fails on the old code: ``(count, None)`` and ``[buf, count, None, None]`` were refused, bad specs
    raised MPI.Exception where mpi4py raises ValueError/KeyError/TypeError, Fortran-ordered arrays were
    refused, and ``MPI.buffer`` was a bytearray of its own (no ``frombuffer``/``fromaddress``, no
    read-only buffers, items and slices as a bytearray's)."""
    as_under_mpich(source, n)
