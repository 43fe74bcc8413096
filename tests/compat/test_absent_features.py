"""Features fmpi lacks (MPI-IO, sessions, partitioned point-to-point) are reported the way mpi4py reports a feature its MPI library lacks
(NotImplementedError on use), so code that probes for them — mpi4py's own test suite among it —
skips them instead of stopping at import with an AttributeError."""

PROBES = """
from mpi4py import MPI
probes = {
    "win": lambda: MPI.Win.Create(None, 1, MPI.INFO_NULL, MPI.COMM_SELF),
    "win-allocate": lambda: MPI.Win.Allocate(1, 1, MPI.INFO_NULL, MPI.COMM_SELF),
    "file": lambda: MPI.File.Open(MPI.COMM_SELF, "x"),
    "session": lambda: MPI.Session.Init(),
    "partitioned": lambda: MPI.COMM_SELF.Psend_init(bytearray(1), 1, 0, 0),
}
for name, probe in probes.items():
    try:
        probe()
        print(name, "present")
    except NotImplementedError:
        print(name, "absent")
print("nulls", bool(MPI.WIN_NULL), bool(MPI.FILE_NULL), bool(MPI.SESSION_NULL), MPI.WIN_NULL == MPI.Win())
print("classes", issubclass(MPI.Graphcomm, MPI.Topocomm), issubclass(MPI.Distgraphcomm, MPI.Intracomm))
"""


def test_absent_features_raise_not_implemented(program, fmpi):
    run = fmpi(1, program(PROBES), timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.lines() == [
        "win present", "win-allocate present", "file absent", "session absent", "partitioned absent",
        "nulls False False False True", "classes True True",
    ]
