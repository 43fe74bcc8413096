"""What goes into the deployment zip: no secrets, dependencies built for the runtime, libraries that load there.

Real folders, real pip (from the package index this machine is set up with),
real wheels and ELF files; nothing of fmpi's is mocked.
"""

from __future__ import annotations

import json
import shutil
import struct
import zipfile
from pathlib import Path

import numpy
import pytest

from fmpi.lambda_runtime.runtimes import RUNTIMES
from fmpi.launcher.lambda_backend import packaging
from fmpi.util.elf import NotElf, library_needs

NUMPY_CORE = Path(numpy.__file__).parent / "_core"


def _folder_with_secrets(tmp_path: Path) -> Path:
    code = tmp_path / "project"
    for rel, text in {
        "train.py": "print('train')\n",
        "lib/util.py": "X = 1\n",
        ".env": "API_KEY=secret\n",
        ".aws/credentials": "[default]\naws_secret_access_key = secret\n",
        ".ssh/id_ed25519": "-----BEGIN OPENSSH PRIVATE KEY-----\n",
        ".git/config": "[core]\n",
        ".venv/pyvenv.cfg": "home = /usr\n",
        ".venv/lib/site.py": "junk\n",
        "myenv/pyvenv.cfg": "home = /usr\n",
        "myenv/bin/activate": "junk\n",
        "node_modules/x/index.js": "junk\n",
        "lib/__pycache__/util.cpython-311.pyc": "junk\n",
        "results/big.csv": "1,2,3\n",
        "config/.streamlit/config.toml": "x = 1\n",
    }.items():
        path = code / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return code


def _program_entries(bundle: packaging.Bundle) -> set[str]:
    with zipfile.ZipFile(bundle.path) as zf:
        return {n[len("app/"):] for n in zf.namelist() if n.startswith("app/") and "__pycache__" not in n}


def test_secrets_environments_and_caches_stay_out(tmp_path):
    bundle = packaging.build_bundle(_folder_with_secrets(tmp_path), vendor=False, cache_dir=tmp_path / "cache")
    assert _program_entries(bundle) == {"train.py", "lib/util.py", "results/big.csv"}


def test_fmpiignore_adds_patterns_and_takes_defaults_back(tmp_path):
    code = _folder_with_secrets(tmp_path)
    (code / ".fmpiignore").write_text("# data stays home\nresults/\n!config/.streamlit/\n")
    bundle = packaging.build_bundle(code, vendor=False, cache_dir=tmp_path / "cache")
    assert _program_entries(bundle) == {"train.py", "lib/util.py", "config/.streamlit/config.toml"}


def test_dependencies_are_built_for_the_runtime_not_copied(tmp_path, bundle_cache):
    """numpy here needs glibc 2.27; the python3.11 runtime has 2.26: the zip must carry a build that loads there."""
    code = tmp_path / "app"
    code.mkdir()
    (code / "main.py").write_text("import numpy\n")
    bundle = packaging.build_bundle(code, runtime=RUNTIMES["python3.11"], architecture="x86_64",
                                    cache_dir=bundle_cache / "lambda")
    with zipfile.ZipFile(bundle.path) as zf:
        manifest = json.loads(zf.read("fmpi_bundle.json"))
        wheel = next(zf.read(n).decode() for n in zf.namelist() if n.startswith("numpy-") and n.endswith("/WHEEL"))
        extension = next(n for n in zf.namelist() if "/_multiarray_umath." in n and n.endswith(".so"))
        extracted = tmp_path / "ext.so"
        extracted.write_bytes(zf.read(extension))
    assert manifest["runtime"] == "python3.11" and manifest["deps"] == "target"
    assert "manylinux2014_x86_64" in wheel or "manylinux_2_17_x86_64" in wheel, wheel
    assert library_needs(extracted).glibc <= (2, 26)
    assert "boto3" not in manifest["vendored"]  # the runtime has it


def test_a_library_for_a_newer_glibc_is_refused_with_the_fix(tmp_path):
    """The numpy installed here (copied with --deps local) does not load on the python3.11 runtime."""
    local = library_needs(next(NUMPY_CORE.glob("_multiarray_umath.*.so")))
    if local.glibc is None or local.glibc <= (2, 26):
        pytest.skip(f"this numpy needs only glibc {local.glibc_text()}, which the python3.11 runtime has")
    code = tmp_path / "app"
    code.mkdir()
    (code / "main.py").write_text("")
    with pytest.raises(packaging.PackagingError) as refused:
        packaging.build_bundle(code, deps="local", runtime=RUNTIMES["python3.11"], architecture="x86_64",
                               cache_dir=tmp_path / "cache")
    message = str(refused.value)
    assert f"needs glibc {local.glibc_text()}" in message and "python3.11 runtime (Amazon Linux 2, glibc 2.26" in message
    assert "--runtime python3.12" in message and "--deps local" in message
    assert not list((tmp_path / "cache").glob("*.zip"))  # refused before anything was zipped


def test_libraries_of_the_program_folder_are_checked_too(tmp_path):
    code = tmp_path / "app"
    code.mkdir()
    (code / "main.py").write_text("")
    (code / "fast.so").write_bytes(b"\xcf\xfa\xed\xfe" + bytes(60))  # a macOS (Mach-O) build
    with pytest.raises(packaging.PackagingError, match="fast.so is not a Linux library"):
        packaging.build_bundle(code, vendor=False, architecture="x86_64", cache_dir=tmp_path / "cache")
    (code / "fast.so").write_bytes(_elf_header(machine=183))  # an arm64 build
    with pytest.raises(packaging.PackagingError, match="fast.so is built for arm64, not x86_64"):
        packaging.build_bundle(code, vendor=False, architecture="x86_64", cache_dir=tmp_path / "cache")
    bundle = packaging.build_bundle(code, vendor=False, architecture="arm64", cache_dir=tmp_path / "cache")
    assert "app/fast.so" in zipfile.ZipFile(bundle.path).namelist()


def test_glibc_requirement_is_read_from_the_library(tmp_path):
    umath = next(NUMPY_CORE.glob("_multiarray_umath.*.so"))
    needs = library_needs(umath)
    assert needs.machine in ("x86_64", "arm64") and needs.glibc is not None and needs.glibc >= (2, 17)
    copy = tmp_path / "libc.so.6"
    shutil.copy(umath, copy)
    assert library_needs(copy) == needs
    with pytest.raises(NotElf):
        library_needs(Path(numpy.__file__))


def _elf_header(machine: int) -> bytes:
    """A 64-bit little-endian ELF header with no sections: a library of that machine needing nothing."""
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    rest = struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, 0, 0, 0, 64, 0, 0, 64, 0, 0)
    return ident + rest
