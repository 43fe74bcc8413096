"""Objects that are buffers without the buffer protocol, as mpi4py takes them (issue 26, mpi4py's
test_msgspec): DLPack exporters (versioned capsules with the read-only flag, the older capsules, device
tuples checked, a capsule handed out twice) and ``__cuda_array_interface__`` objects (every key checked
with mpi4py's error), sent, received and wrapped in ``MPI.buffer``. Compared with MPICH + mpi4py.
"""

import pytest
from tests_support import OUTCOMES_PRELUDE

pytestmark = pytest.mark.timeout(300)

PRELUDE = OUTCOMES_PRELUDE + r"""
def exchange(send, recv):
    comm.Sendrecv(send, peer, 3, recv, source, 3)
"""

DLPACK = PRELUDE + r"""
class Tensor:
    def __init__(self, array):
        self.array = array
    def __dlpack_device__(self):
        return self.array.__dlpack_device__()
    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

class OldTensor(Tensor):
    def __dlpack__(self, stream=None):  # a producer from before DLPack 1.0: no max_version
        return self.array.__dlpack__()

for kind in (Tensor, OldTensor):
    for typecode in "bhilfd":
        send = kind(np.arange(5, dtype=typecode) + comm.rank)
        recv = kind(np.zeros(5, dtype=typecode))
        exchange(send, recv)
        exchange([send, 2, 1, None], [recv, (2, 3), None])
        out.append((kind.__name__, typecode, recv.array.tolist()))
frozen = np.arange(4, dtype="i")
frozen.flags.writeable = False
outcome("read-only send", lambda: exchange(Tensor(frozen), np.zeros(4, "i")))
outcome("read-only receive", lambda: exchange(np.zeros(4, "i"), Tensor(frozen)))
tensor = Tensor(np.arange(4, dtype="i"))
for device in (None, (None, 0), (1, None), (1,), (1, 0, 1)):
    tensor.__dlpack_device__ = lambda device=device: device
    outcome(f"device {device}", lambda: MPI.Get_address(tensor) == tensor.array.ctypes.data)
del tensor.__dlpack_device__
capsule = tensor.array.__dlpack__(max_version=(1, 0))
tensor.__dlpack__ = lambda **kwargs: capsule
outcome("capsule twice", lambda: [MPI.Get_address(tensor) == tensor.array.ctypes.data for _ in range(2)])
tensor.__dlpack__ = lambda **kwargs: None
outcome("no capsule", lambda: MPI.Get_address(tensor))
memory = MPI.buffer(Tensor(np.arange(4, dtype="i")))
out.append(("MPI.buffer", memory.nbytes, memory.readonly, memory.cast("i").tolist()))
os.write(1, "".join(f"{comm.rank} {item!r}\n" for item in out).encode())
"""

CAI = PRELUDE + r"""
class Device:
    def __init__(self, array, readonly=False):
        self.array = array
        self.__cuda_array_interface__ = {
            "version": 3, "data": (array.ctypes.data, readonly), "typestr": array.dtype.str,
            "shape": array.shape, "strides": None, "descr": [("", array.dtype.str)],
        }

send = Device(np.arange(6, dtype="d") + comm.rank)
recv = Device(np.zeros(6, dtype="d"))
exchange(send, recv)
out.append(("received", recv.array.tolist()))
exchange(send, [Device(np.zeros(12, "i")), MPI.BYTE])
outcome("read-only receive", lambda: exchange(send, Device(np.zeros(6, "d"), readonly=True)))
bad = {"data": None, "typestr": None, "shape": None, "strides": 42, "descr": 42, "mask": True}
bad_values = [("data", 0), ("data", (1,)), ("data", ()), ("typestr", 42), ("typestr", "|uX"), ("shape", 3),
              ("shape", (6, -1)), ("strides", (16,)), ("strides", (8, 8)), ("mask", None)]
order = ">" if np.little_endian else "<"
bad_values += [("typestr", order + "f8"), ("typestr", "#f8"), ("typestr", "|f8")]
for key, value in list(bad.items()) + bad_values + [(key, "missing") for key in ("data", "typestr", "shape")]:
    target = Device(np.zeros(6, "d"))
    if value == "missing":
        del target.__cuda_array_interface__[key]
    else:
        target.__cuda_array_interface__[key] = value
        if key == "shape":
            target.__cuda_array_interface__["strides"] = None
    outcome(f"{key}={value!r}", lambda: exchange(send, target))
for iface in (None, {}, [("data", (0, False))]):
    target = Device(np.zeros(6, "d"))
    target.__cuda_array_interface__ = iface
    outcome(f"interface {iface!r}", lambda: exchange(send, target))
target = Device(np.zeros(6, "d"))
target.__cuda_array_interface__.update(shape=(2,), strides=(24,), typestr="|V24", descr=[("", "<f8")] * 3)
with warnings.catch_warnings():
    warnings.simplefilter("error")
    outcome("descr", lambda: exchange(send, target))
memory = MPI.buffer(Device(np.arange(3, dtype="i")))
out.append(("MPI.buffer", memory.nbytes, memory.readonly))
for name, call in (("cast", lambda: memory.cast("i")), ("tobytes", lambda: memory.tobytes()),
                   ("item", lambda: memory[0])):
    outcome(f"device memory {name}", call)
os.write(1, "".join(f"{comm.rank} {item!r}\n" for item in out).encode())
"""


@pytest.mark.parametrize(("name", "source"), [("dlpack", DLPACK), ("cai", CAI)])
@pytest.mark.parametrize("n", [1, 2])
def test_foreign_buffers_as_under_mpich(as_under_mpich, n, name, source):
    """Fails on the old code: DLPack capsules were consumed and versioned ones refused, device tuples
    unchecked, CUDA-array-interface objects taken through numpy without mpi4py's checks, and
    ``MPI.buffer`` could not wrap either."""
    as_under_mpich(source, n)
