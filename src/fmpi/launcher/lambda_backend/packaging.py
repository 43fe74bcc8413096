"""The deployment zip: fmpi, the dependencies the runtime lacks, and the program's directory.

Layout (the zip's root is the function's task root, ``/var/task``)::

    fmpi/...                 this fmpi (the handler is fmpi.lambda_runtime.handler.handler)
    numpy/..., aws_lambda_powertools/..., ...   dependencies copied from this environment
    app/...                  the program's directory (or --code DIR)
    fmpi_bundle.json         what went in
    .../__pycache__/*.pyc    every .py above, compiled (see below)

The zip is deterministic (sorted entries, fixed timestamps and modes), so the
same files give the same bytes and the same ``CodeSha256``: deploying
unchanged code is a no-op. Built zips are cached by a hash of their content
under ``$FMPI_CACHE_DIR`` (default ``~/.cache/fmpi``)/lambda.

Lambda's limits: a zip over 50 MB cannot be uploaded with the API call
itself (``deploy`` sends it through S3, ``s3code``), and the unzipped
function, layers included, must stay within 250 MB whichever way it comes
(checked here, before anything is zipped).

The task root is read-only, so Python cannot cache what it compiles there:
without ``.pyc`` files every cold start would compile fmpi, numpy's Python
modules and powertools from source again. Each ``.py`` is therefore
compiled here, by this interpreter (the runtime is this interpreter's
version, see ``lambda_runtime``), into an unchecked hash-based ``.pyc``
(PEP 552): used as is, whatever timestamps the extracted files get. A file
that does not compile is left to fail (or not) where it is imported.

Dependencies are copied from the environment fmpirun runs in, so they must
suit the Lambda runtime (Linux, same Python version and architecture; for
binary wheels, a glibc no newer than the runtime's). ``--no-bundle-deps``
leaves them out, for when a layer (``--layers``) provides them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
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

ZIP_LIMIT = 50 * 1024 * 1024  # bytes: Lambda's limit for a zip uploaded with the API call (larger ones go through S3)
UNZIPPED_LIMIT = 250 * 1024 * 1024  # bytes: Lambda's limit for the unzipped function and its layers
# The limits above can be lowered (tests, or to send every zip through S3) with these variables, in bytes.
ZIP_LIMIT_ENV = "FMPI_LAMBDA_ZIP_LIMIT"
UNZIPPED_LIMIT_ENV = "FMPI_LAMBDA_UNZIPPED_LIMIT"
VENDORED = ("numpy", "aws-lambda-powertools", "redis")  # what a rank needs that the runtime lacks (redis: redis:// relays)
RUNTIME_PROVIDED = frozenset(
    {"boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six", "urllib3", "awslambdaric", "simplejson"}
)
SKIPPED_DIRS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", ".mypy_cache", ".pytest_cache",
     ".ruff_cache", "node_modules", ".idea", ".vscode", ".ipynb_checkpoints"}
)
CACHE_KEEP = 8  # zips kept in the cache
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
CODE_ROOT = "/var/task"  # where Lambda extracts the zip (the function's task root)
# glibc of the Lambda Python runtimes: python3.9-3.11 run on Amazon Linux 2, later ones on AL2023.
RUNTIME_GLIBC = {"python3.9": (2, 26), "python3.10": (2, 26), "python3.11": (2, 26)}
DEFAULT_GLIBC = (2, 34)


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


def lambda_runtime() -> str:
    """The Lambda runtime matching this interpreter (its dependencies are copied into the zip)."""
    return f"python{sys.version_info.major}.{sys.version_info.minor}"


def lambda_architecture() -> str:
    machine = platform.machine().lower()
    return "arm64" if machine in ("aarch64", "arm64") else "x86_64"


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
    code_dir: Path, *, vendor: bool = True, cache_dir: Path | None = None, max_unzipped: int | None = None
) -> Bundle:
    """The deployment zip for the program in `code_dir` (built, or taken from the cache).

    Refused before anything is zipped when the unzipped content exceeds
    `max_unzipped` (default: ``unzipped_limit()``), a limit that no upload
    path lifts. The zip's size is not limited here: ``deploy`` sends a zip
    over the direct-upload limit through S3.
    """
    code_dir = Path(code_dir).resolve()
    if not code_dir.is_dir():
        raise PackagingError(f"code directory not found: {code_dir}")
    entries: dict[str, Path] = {}
    warnings: list[str] = []
    _add_tree(entries, _fmpi_dir(), "fmpi")
    vendored: dict[str, str] = {}
    if vendor:
        for dist in _closure(VENDORED):
            warnings += _platform_warnings(dist)
            vendored[_canonical(dist.metadata["Name"])] = dist.version
            _add_distribution(entries, dist)
    _add_tree(entries, code_dir, CODE_DIR)
    manifest = json.dumps(
        {"fmpi": _fmpi_version(), "runtime": lambda_runtime(), "bytecode": sys.implementation.cache_tag,
         "code_dir": code_dir.name, "vendored": vendored},
        sort_keys=True,
    ).encode()

    unzipped = sum(p.stat().st_size for p in entries.values()) + len(manifest)
    limit = unzipped_limit() if max_unzipped is None else max_unzipped
    if unzipped > limit:
        biggest = sorted(entries.items(), key=lambda kv: kv[1].stat().st_size, reverse=True)[:3]
        raise PackagingError(
            f"the function is too large: {_mb(unzipped)} unzipped, and Lambda allows at most {_mb(limit)} unzipped "
            "(its 250 MB limit for the function and its layers together, through S3 or not). Largest files: "
            + ", ".join(f"{name} ({_mb(p.stat().st_size)})" for name, p in biggest)
            + ". Point --code at a smaller directory (data belongs in S3, read at run time), or provide "
            "dependencies from layers (--layers ARN, with --no-bundle-deps for numpy and powertools)."
        )

    digest = _digest(entries, manifest)
    cache = (cache_dir or cache_root() / "lambda")
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{digest[:32]}.zip"
    cached = path.is_file()
    if not cached:
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        _write_zip(tmp, entries, manifest)
        files, unzipped = _contents(tmp)
        if unzipped > limit:  # (only the compiled modules can have pushed it over)
            tmp.unlink()
            raise PackagingError(
                f"the function is too large: {_mb(unzipped)} unzipped with its compiled modules, and Lambda allows "
                f"at most {_mb(limit)}. Provide dependencies from layers (--layers ARN, with --no-bundle-deps)."
            )
        os.replace(tmp, path)
        _prune(cache)
    else:
        os.utime(path)
        files, unzipped = _contents(path)
    zipped = path.stat().st_size
    code_sha256 = base64.b64encode(hashlib.sha256(path.read_bytes()).digest()).decode()
    return Bundle(path, digest, code_sha256, zipped, unzipped, files, cached, warnings)


# ------------------------------------------------------------------- contents


def _fmpi_dir() -> Path:
    import fmpi

    return Path(fmpi.__file__).resolve().parent


def _fmpi_version() -> str:
    from ... import __version__

    return __version__


def _add_tree(entries: dict[str, Path], root: Path, prefix: str) -> None:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in SKIPPED_DIRS and not d.endswith(".egg-info")
            and not (Path(dirpath, d) / "pyvenv.cfg").exists()
        )
        for name in filenames:
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(dirpath, name)
            if not path.is_file():
                continue
            arcname = f"{prefix}/{path.relative_to(root).as_posix()}"
            entries.setdefault(arcname, path)


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


def _platform_warnings(dist: metadata.Distribution) -> list[str]:
    """Binary wheels built for a newer glibc than the runtime's will not import on Lambda."""
    try:
        wheel = dist.read_text("WHEEL") or ""
    except OSError:
        return []
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    platforms = {t.split("-")[-1] for t in tags}
    if not platforms or platforms == {"any"}:
        return []
    name = f"{dist.metadata['Name']} {dist.version}"
    if not sys.platform.startswith("linux"):
        return [f"{name} is built for {sys.platform}, but Lambda runs Linux: provide it with a layer (--layers ARN --no-bundle-deps)"]
    need = min((_glibc(p) for p in platforms), default=None)
    have = RUNTIME_GLIBC.get(lambda_runtime(), DEFAULT_GLIBC)
    if need is not None and need > have:
        return [
            f"{name} is a manylinux_{need[0]}_{need[1]} build, but the {lambda_runtime()} Lambda runtime has "
            f"glibc {have[0]}.{have[1]}: it may not import there. Install an older-glibc build (e.g. pip install "
            f"--platform manylinux2014_{platform.machine()} --only-binary=:all:) or provide it with a layer."
        ]
    return []


def _glibc(tag: str) -> tuple[int, int] | None:
    m = re.match(r"manylinux_(\d+)_(\d+)_", tag)
    if m:
        return int(m.group(1)), int(m.group(2))
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    return next((v for k, v in legacy.items() if tag.startswith(k + "_")), None)


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


def _write_zip(target: Path, entries: dict[str, Path], manifest: bytes) -> None:
    compiled = _compile_all(entries)
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
