"""The deployment zip: fmpi, the dependencies the runtime lacks, and the program's directory.

Layout (the zip's root is the function's task root, ``/var/task``)::

    fmpi/...                 this fmpi (the handler is fmpi.lambda_runtime.handler.handler)
    numpy/..., aws_lambda_powertools/..., ...   dependencies built for the runtime (target_deps)
    app/...                  the program's directory (or --code DIR), minus secrets and caches (code_files)
    fmpi_mpi4py/mpi4py/...   the .py files of the local mpi4py, if any (mpi4py.futures, .util: mpi4py_python)
    fmpi_bundle.json         what went in
    .../__pycache__/*.pyc    every .py above, compiled (see below)

The zip is deterministic (sorted entries, fixed timestamps and modes), so the
same files give the same bytes and the same ``CodeSha256``: deploying
unchanged code is a no-op. Built zips are cached by a hash of their content
under ``$FMPI_CACHE_DIR`` (default ``~/.cache/fmpi``)/lambda.

Lambda's limits: a zip over 50 MB cannot be uploaded with the API call
itself (``deploy`` sends it through S3, ``s3code``), and the unzipped
function, layers included, must stay within 250 MB whichever way it comes
(checked here, before anything is zipped). Every shared library must load
on the runtime (its architecture and glibc, ``libraries``): checked here too.

The task root is read-only, so Python cannot cache what it compiles there:
without ``.pyc`` files every cold start would compile fmpi, numpy's Python
modules and powertools from source again. Each ``.py`` is therefore
compiled here into an unchecked hash-based ``.pyc`` (PEP 552): used as is,
whatever timestamps the extracted files get. Only this interpreter's
bytecode can be made here, so a runtime of another Python version gets the
sources alone (and a warning). A file that does not compile is left to fail
(or not) where it is imported.

Dependencies (``deps``): ``target`` (the default) builds them for the
runtime with pip; ``local`` copies them from the environment fmpirun runs in
(they must suit the runtime: the library check says when they do not);
``none`` leaves them out, for when a layer (``--layers``) provides them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import py_compile
import re
import stat
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from ... import settings
from ...lambda_runtime.event import CODE_DIR
from ...lambda_runtime.runtimes import Runtime, default_architecture, default_runtime
from .code_files import IgnoreFileError, program_files
from .libraries import LibraryMismatch, check_libraries
from .mpi4py_python import installed_mpi4py, mpi4py_python_files
from .target_deps import DependencyBuildError, target_dependencies

ZIP_LIMIT = 50 * 1024 * 1024  # bytes: Lambda's limit for a zip uploaded with the API call (larger ones go through S3)
UNZIPPED_LIMIT = 250 * 1024 * 1024  # bytes: Lambda's limit for the unzipped function and its layers
# The limits above can be lowered (tests, or to send every zip through S3) with these variables, in bytes.
ZIP_LIMIT_ENV = "FMPI_LAMBDA_ZIP_LIMIT"
UNZIPPED_LIMIT_ENV = "FMPI_LAMBDA_UNZIPPED_LIMIT"
# what a rank needs that the runtime lacks (redis and cryptography: redis:// relays, whose messages are sealed)
VENDORED = ("numpy", "aws-lambda-powertools", "redis", "cryptography")
# The same, as pip requirements for the runtime's build (fmpi's own lower bounds).
TARGET_REQUIREMENTS = ("numpy>=1.24", "aws-lambda-powertools>=3", "redis>=5", "cryptography>=42")
RUNTIME_PROVIDED = frozenset(
    {"boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six", "urllib3", "awslambdaric", "simplejson"}
)
DEPS_SOURCES = ("target", "local", "none")
CACHE_KEEP = 8  # zips kept in the cache
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
CODE_ROOT = "/var/task"  # where Lambda extracts the zip (the function's task root)


class PackagingError(Exception):
    """The deployment package cannot be built, or Lambda would refuse it."""


@dataclass
class Bundle:
    path: Path  # the zip, in the cache
    digest: str  # hash of the content (the cache key)
    code_sha256: str  # base64 SHA-256 of the zip's bytes: Lambda's CodeSha256
    zipped_size: int
    unzipped_size: int
    files: int
    cached: bool  # taken from the cache, not built now
    warnings: list[str] = field(default_factory=list)

    def read(self) -> bytes:
        return self.path.read_bytes()

    @property
    def sha256_hex(self) -> str:
        """The zip's SHA-256 in hex (``code_sha256`` is the same hash in base64, as Lambda reports it)."""
        return base64.b64decode(self.code_sha256).hex()


def cache_root() -> Path:
    return Path(_settings().cache_dir or Path.home() / ".cache" / "fmpi")


def direct_upload_limit() -> int:
    """Bytes: a larger zip is deployed through S3 (Lambda's 50 MB, unless ``FMPI_LAMBDA_ZIP_LIMIT`` lowers it)."""
    return min(_settings().lambda_zip_limit or ZIP_LIMIT, ZIP_LIMIT)  # Lambda's own limit cannot be raised


def unzipped_limit() -> int:
    """Bytes: Lambda refuses a larger unzipped function (250 MB, unless ``FMPI_LAMBDA_UNZIPPED_LIMIT`` lowers it)."""
    return min(_settings().lambda_unzipped_limit or UNZIPPED_LIMIT, UNZIPPED_LIMIT)


def _settings() -> settings.Settings:
    """The launcher's FMPI_* settings, read at each packaging step (a bad value is a packaging error)."""
    try:
        return settings.read()
    except ValueError as exc:
        raise PackagingError(str(exc)) from None


def build_bundle(
    code_dir: Path,
    *,
    vendor: bool = True,
    deps: str = "target",
    runtime: Runtime | None = None,
    architecture: str | None = None,
    cache_dir: Path | None = None,
    max_unzipped: int | None = None,
) -> Bundle:
    """The deployment zip for the program in `code_dir` (built, or taken from the cache).

    `deps` says where the dependencies come from (see the module docstring);
    ``vendor=False`` is ``deps="none"``. Refused before anything is zipped
    when the unzipped content exceeds `max_unzipped` (default:
    ``unzipped_limit()``), a limit that no upload path lifts, or when a
    shared library cannot load on `runtime` (default: this interpreter's
    version) on `architecture` (default: this machine's). The zip's size is
    not limited here: ``deploy`` sends a zip over the direct-upload limit
    through S3.
    """
    code_dir = Path(code_dir).resolve()
    if not code_dir.is_dir():
        raise PackagingError(f"code directory not found: {code_dir}")
    runtime = runtime or default_runtime()
    architecture = architecture or default_architecture()
    deps = deps if vendor else "none"
    cache = cache_dir or cache_root() / "lambda"
    entries: dict[str, Path] = {}
    _add_tree(entries, _fmpi_dir(), "fmpi")
    entries.update(mpi4py_python_files(installed_mpi4py()))
    try:
        vendored = _add_dependencies(entries, deps, runtime, architecture, cache)
        for rel, path in program_files(code_dir).items():
            entries.setdefault(f"{CODE_DIR}/{rel}", path)
        check_libraries(entries, runtime, architecture)
    except (IgnoreFileError, DependencyBuildError, LibraryMismatch) as exc:
        raise PackagingError(str(exc)) from None
    compiles = runtime.python == sys.version_info[:2]
    warnings = [] if compiles else [
        f"this is Python {sys.version_info.major}.{sys.version_info.minor}, so the package has no compiled modules "
        f"for the {runtime.name} runtime: every cold start compiles them (seconds). Run fmpirun with Python "
        f"{runtime.version} to include them"
    ]
    manifest = json.dumps(
        {"fmpi": _fmpi_version(), "runtime": runtime.name, "architecture": architecture, "deps": deps,
         "bytecode": sys.implementation.cache_tag if compiles else None, "code_dir": code_dir.name, "vendored": vendored},
        sort_keys=True,
    ).encode()

    limit = unzipped_limit() if max_unzipped is None else max_unzipped
    _refuse_too_large(entries, len(manifest), limit)
    digest = _digest(entries, manifest)
    path, cached, files, unzipped = _zip_into_cache(cache, digest, entries, manifest, compiles, limit)
    zipped = path.stat().st_size
    code_sha256 = base64.b64encode(hashlib.sha256(path.read_bytes()).digest()).decode()
    return Bundle(path, digest, code_sha256, zipped, unzipped, files, cached, warnings)


def _refuse_too_large(entries: dict[str, Path], manifest_size: int, limit: int) -> None:
    """Refuse, before zipping, content over Lambda's unzipped limit, naming the largest files."""
    unzipped = sum(p.stat().st_size for p in entries.values()) + manifest_size
    if unzipped > limit:
        biggest = sorted(entries.items(), key=lambda kv: kv[1].stat().st_size, reverse=True)[:3]
        raise PackagingError(
            f"the function is too large: {_mb(unzipped)} unzipped, and Lambda allows at most {_mb(limit)} unzipped "
            "(its 250 MB limit for the function and its layers together, through S3 or not). Largest files: "
            + ", ".join(f"{name} ({_mb(p.stat().st_size)})" for name, p in biggest)
            + ". Point --code at a smaller directory or list data in its .fmpiignore (data belongs in S3, read at run "
            "time), or provide dependencies from layers (--layers ARN, with --no-bundle-deps for numpy and powertools)."
        )


def _zip_into_cache(cache: Path, digest: str, entries: dict[str, Path], manifest: bytes, compiles: bool,
                    limit: int) -> tuple[Path, bool, int, int]:
    """(path, cached, files, unzipped bytes) of the zip of `entries` in the cache, written unless already there."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{digest[:32]}.zip"
    if path.is_file():
        os.utime(path)
        return (path, True, *_contents(path))
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        _write_zip(tmp, entries, manifest, compiles)
    except BaseException:
        tmp.unlink(missing_ok=True)  # Ctrl-C mid-zip leaves no half-written file behind
        raise
    files, unzipped = _contents(tmp)
    if unzipped > limit:  # (only the compiled modules can have pushed it over)
        tmp.unlink()
        raise PackagingError(
            f"the function is too large: {_mb(unzipped)} unzipped with its compiled modules, and Lambda allows "
            f"at most {_mb(limit)}. Provide dependencies from layers (--layers ARN, with --no-bundle-deps)."
        )
    os.replace(tmp, path)
    _prune(cache)
    return path, False, files, unzipped


# ------------------------------------------------------------------- contents


def _fmpi_dir() -> Path:
    import fmpi

    return Path(fmpi.__file__).resolve().parent


def _fmpi_version() -> str:
    from ... import __version__

    return __version__


def _add_tree(entries: dict[str, Path], root: Path, prefix: str) -> None:
    """Every file under `root` (fmpi's own folder) but compiled modules, as `prefix`/relative path."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.endswith(".egg-info"))
        for name in filenames:
            path = Path(dirpath, name)
            if not name.endswith((".pyc", ".pyo")) and path.is_file():
                entries.setdefault(f"{prefix}/{path.relative_to(root).as_posix()}", path)


def _add_dependencies(entries: dict[str, Path], deps: str, runtime: Runtime, architecture: str, cache: Path) -> dict[str, str]:
    """Add the dependencies a rank needs; returns {name: version} of what went in."""
    if deps not in DEPS_SOURCES:
        raise PackagingError(f"--deps must be one of {', '.join(DEPS_SOURCES)}, not {deps!r}")
    if deps == "none":
        return {}
    if deps == "local":
        vendored = {}
        for dist in _closure(VENDORED):
            vendored[_canonical(dist.metadata["Name"])] = dist.version
            _add_distribution(entries, dist)
        return vendored
    folder, _cached = target_dependencies(TARGET_REQUIREMENTS, runtime, architecture, cache)
    vendored = {}
    for dist in metadata.distributions(path=[str(folder)]):
        name = _canonical(dist.metadata["Name"])
        if name in RUNTIME_PROVIDED:
            continue
        vendored[name] = dist.version
        _add_distribution(entries, dist)
    return vendored


def _closure(names: tuple[str, ...]) -> list[metadata.Distribution]:
    """The distributions `names` need, with their requirements, minus what the runtime provides."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = _canonical(todo.pop())
        if name in found or name in RUNTIME_PROVIDED:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            if name in map(_canonical, names):
                raise PackagingError(
                    f"{name} is not installed here, so it cannot be bundled: pip install 'fmpi[aws]', "
                    "or provide it with a layer (--layers ARN --no-bundle-deps)"
                ) from None
            continue  # an optional requirement that is not installed
        found[name] = dist
        for req in dist.requires or ():
            marker = req.split(";", 1)[1] if ";" in req else ""
            if "extra" in marker:
                continue
            todo.append(re.split(r"[\s;<>=!~\[(]", req, maxsplit=1)[0])
    return [found[k] for k in sorted(found)]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _add_distribution(entries: dict[str, Path], dist: metadata.Distribution) -> None:
    for f in dist.files or ():
        if f.parts[0] == ".." or "__pycache__" in f.parts or f.suffix in (".pyc", ".pyo"):
            continue
        path = Path(dist.locate_file(f))
        if path.is_file():
            entries.setdefault(f.as_posix(), path)


# ------------------------------------------------------------------------ zip


def _digest(entries: dict[str, Path], manifest: bytes) -> str:
    h = hashlib.sha256(manifest)
    for arcname in sorted(entries):
        path = entries[arcname]
        h.update(arcname.encode() + b"\0" + str(_mode(path)).encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _mode(path: Path) -> int:
    return 0o755 if path.stat().st_mode & stat.S_IXUSR else 0o644


def _write_zip(target: Path, entries: dict[str, Path], manifest: bytes, compile_modules: bool) -> None:
    compiled = _compile_all(entries) if compile_modules else {}
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for arcname in sorted(entries.keys() | compiled.keys()):
            if arcname in compiled:
                zf.writestr(_info(arcname, 0o644), compiled[arcname])
            else:
                path = entries[arcname]
                zf.writestr(_info(arcname, _mode(path)), path.read_bytes())
        zf.writestr(_info("fmpi_bundle.json", 0o644), manifest)


def _compile_all(entries: dict[str, Path]) -> dict[str, bytes]:
    """arcname of the .pyc -> its bytes, for every .py entry that compiles (see the module docstring)."""
    compiled: dict[str, bytes] = {}
    tag = sys.implementation.cache_tag
    with tempfile.TemporaryDirectory(prefix="fmpi-pyc-") as tmp:
        out = os.path.join(tmp, "module.pyc")
        for arcname, path in entries.items():
            if not arcname.endswith(".py"):
                continue
            folder, _, name = arcname.rpartition("/")
            try:
                # dfile: tracebacks on Lambda name the file where it is there, not where it was built
                py_compile.compile(str(path), cfile=out, dfile=f"{CODE_ROOT}/{arcname}", doraise=True,
                                   invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
            except (py_compile.PyCompileError, SyntaxError, ValueError):
                continue
            cache_dir = f"{folder}/__pycache__" if folder else "__pycache__"
            compiled[f"{cache_dir}/{name[:-3]}.{tag}.pyc"] = Path(out).read_bytes()
    return compiled


def _contents(zip_path: Path) -> tuple[int, int]:
    """(files, unzipped bytes) of a zip."""
    with zipfile.ZipFile(zip_path) as zf:
        infos = zf.infolist()
        return len(infos), sum(info.file_size for info in infos)


def _info(arcname: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(arcname, ZIP_TIME)
    info.create_system = 3  # unix: the extractor honours the mode bits
    info.external_attr = (stat.S_IFREG | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _prune(cache: Path) -> None:
    zips = sorted(cache.glob("*.zip"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in zips[CACHE_KEEP:]:
        try:
            old.unlink()
        except OSError:
            pass


def _mb(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MB"
