"""The code every emulated runtime process starts with: ``python [-S] -c BOOT <handler>``.

It is ``python -m awslambdaric <handler>`` plus three things:

* PR_SET_PDEATHSIG, so that a handler never outlives the process that runs
  the emulator (e.g. pytest SIGKILLed mid-run);
* in another network namespace, a forwarder from 127.0.0.1:<port> there to
  the Runtime API's Unix socket (filesystem sockets cross namespaces; TCP
  to the emulator's loopback does not). The forwarder is a forked child, not
  a thread: awslambdaric's C client holds the GIL while it posts a response,
  so a forwarding thread in the same process could never pass it on;
* the runtime's loader: an extension module of the function's code or layers
  that the real runtime could not load (a newer glibc, another machine) fails
  to import with glibc's message (``fmpi/util/elf.py``, loaded by path: the
  function's own fmpi may differ).

-c keeps sys.path[0] == cwd (the task root), exactly like -m.
"""

BOOT = r"""
import ctypes, os, signal, socket, sys, threading
ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
if os.getppid() != int(os.environ.pop("_EMU_PPID")):
    os._exit(1)
_glibc, _arch = os.environ.pop("_EMU_GLIBC", None), os.environ.pop("_EMU_ARCH", None)
_elf_path, _roots = os.environ.pop("_EMU_ELF", None), os.environ.pop("_EMU_CODE_ROOTS", "")
if _glibc and _elf_path:
    # The runtime's loader: an extension from the function's code or layers that needs a newer glibc (or
    # another machine) than the runtime's fails to import, with glibc's own message.
    import importlib.machinery, importlib.util
    _spec = importlib.util.spec_from_file_location("_fmpi_emulator_elf", _elf_path)
    _elf = sys.modules["_fmpi_emulator_elf"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_elf)
    _have, _roots = tuple(int(x) for x in _glibc.split(".")), tuple(r for r in _roots.split(os.pathsep) if r)
    _create = importlib.machinery.ExtensionFileLoader.create_module
    def _load_checked(self, spec, _create=_create):
        why = spec.origin.startswith(_roots) and _elf.cannot_load(spec.origin, _have, _arch)
        if why:
            raise ImportError(why, name=spec.name, path=spec.origin)
        return _create(self, spec)
    importlib.machinery.ExtensionFileLoader.create_module = _load_checked
_sock_path = os.environ.pop("_EMU_RUNTIME_SOCK", None)
if _sock_path:
    _listener = socket.create_server(("127.0.0.1", 0))
    os.environ["AWS_LAMBDA_RUNTIME_API"] = "127.0.0.1:%d" % _listener.getsockname()[1]
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # ends with the runtime process
        def _pump(src, dst):
            try:
                while True:
                    data = src.recv(65536)
                    if not data:
                        break
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
        while True:
            conn, _ = _listener.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            up = socket.socket(socket.AF_UNIX)
            up.connect(_sock_path)
            threading.Thread(target=_pump, args=(conn, up), daemon=True).start()
            threading.Thread(target=_pump, args=(up, conn), daemon=True).start()
    _listener.close()
from awslambdaric.__main__ import main
main(["awslambdaric", sys.argv[1]])
"""
