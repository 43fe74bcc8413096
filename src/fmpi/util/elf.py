"""What a Linux shared library needs from the system: its machine and the newest glibc symbol version it uses.

A binary built against glibc 2.27 carries version requirements such as
``GLIBC_2.27`` on ``libc.so.6`` in its ``.gnu.version_r`` section (ELF's
"version needed" records); the dynamic loader refuses to load it on an older
glibc ("version `GLIBC_2.27' not found"). Reading those records tells,
before anything is uploaded, whether a library will load on a Lambda
runtime (Amazon Linux 2: glibc 2.26; Amazon Linux 2023: 2.34).

Standalone on purpose (it imports nothing of fmpi's): the local Lambda
endpoint loads this file by path inside the emulated runtime.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
SHT_GNU_VERNEED = 0x6FFFFFFE
MACHINES = {62: "x86_64", 183: "arm64", 3: "i386", 40: "arm"}  # e_machine -> Lambda's architecture names
_GLIBC = re.compile(rb"^GLIBC_(\d+)\.(\d+)(?:\.\d+)?$")


class NotElf(ValueError):
    """The file is not an ELF binary (built for macOS or Windows, or not a library at all)."""


@dataclass(frozen=True)
class LibraryNeeds:
    machine: str  # "x86_64", "arm64", ... or "machine N"
    glibc: tuple[int, int] | None  # the newest GLIBC_x.y symbol version required; None: no glibc requirement

    def glibc_text(self) -> str:
        return "none" if self.glibc is None else f"{self.glibc[0]}.{self.glibc[1]}"


def is_shared_library_name(name: str) -> bool:
    """``x.so``, ``libx.so.6``, ``libx.so.6.0.1``: names the dynamic loader opens."""
    base = name.rsplit("/", 1)[-1]
    return base.endswith(".so") or ".so." in base


def library_needs(path: str | Path) -> LibraryNeeds:
    """The machine and glibc requirement of the ELF file at `path` (``NotElf`` when it is not one)."""
    data = Path(path).read_bytes()
    if data[:4] != ELF_MAGIC:
        raise NotElf(f"{path} is not a Linux (ELF) binary")
    bits64, little = data[4] == 2, data[5] == 1
    order = "<" if little else ">"
    try:
        machine = struct.unpack_from(order + "H", data, 18)[0]
        if bits64:
            shoff, = struct.unpack_from(order + "Q", data, 0x28)
            shentsize, shnum = struct.unpack_from(order + "HH", data, 0x3A)
        else:
            shoff, = struct.unpack_from(order + "I", data, 0x20)
            shentsize, shnum = struct.unpack_from(order + "HH", data, 0x2E)
        sections = [_section(data, order, bits64, shoff + i * shentsize) for i in range(shnum)]
        newest = None
        for kind, offset, size, link, info in sections:
            if kind != SHT_GNU_VERNEED or link >= len(sections):
                continue
            strings = sections[link][1]
            for version in _needed_versions(data, order, offset, info, strings):
                m = _GLIBC.match(version)
                if m:
                    found = (int(m.group(1)), int(m.group(2)))
                    newest = found if newest is None or found > newest else newest
    except struct.error:
        raise NotElf(f"{path} is a truncated or damaged ELF file") from None
    return LibraryNeeds(MACHINES.get(machine, f"machine {machine}"), newest)


def _section(data: bytes, order: str, bits64: bool, at: int) -> tuple[int, int, int, int, int]:
    """(type, offset, size, link, info) of the section header at `at`."""
    if bits64:
        _name, kind, _flags, _addr, offset, size, link, info = struct.unpack_from(order + "IIQQQQII", data, at)
    else:
        _name, kind, _flags, _addr, offset, size, link, info = struct.unpack_from(order + "IIIIIIII", data, at)
    return kind, offset, size, link, info


def _needed_versions(data: bytes, order: str, offset: int, count: int, strings: int) -> list[bytes]:
    """The version names of every Verneed record (and its Vernaux entries) at `offset`."""
    names: list[bytes] = []
    need = offset
    for _ in range(count):
        _version, aux_count, _file, aux, next_need = struct.unpack_from(order + "HHIII", data, need)
        at = need + aux
        for _ in range(aux_count):
            _hash, _flags, _other, name, next_aux = struct.unpack_from(order + "IHHII", data, at)
            end = data.index(b"\0", strings + name)
            names.append(data[strings + name:end])
            if not next_aux:
                break
            at += next_aux
        if not next_need:
            break
        need += next_need
    return names


def cannot_load(path: str | Path, glibc: tuple[int, int], machine: str) -> str | None:
    """Why a system with `glibc` on `machine` would refuse to load the extension at `path`, in the loader's words;
    None when it loads. The extension and the libraries its wheel vendors beside it (auditwheel's
    ``<package>.libs`` folder, or ``<package>/.libs``) are read."""
    for library in [Path(path), *_vendored_libraries(Path(path))]:
        try:
            needs = library_needs(library)
        except (NotElf, OSError):
            return f"{library}: invalid ELF header"
        if needs.machine != machine:
            return f"{library}: cannot open shared object file: wrong ELF machine ({needs.machine}, not {machine})"
        if needs.glibc is not None and needs.glibc > glibc:
            return f"/lib64/libc.so.6: version `GLIBC_{needs.glibc_text()}' not found (required by {library})"
    return None


def _vendored_libraries(extension: Path) -> list[Path]:
    found: list[Path] = []
    for folder in list(extension.parents)[:4]:
        for libs in (folder.parent / f"{folder.name}.libs", folder / ".libs"):
            if libs.is_dir():
                found += sorted(p for p in libs.iterdir() if is_shared_library_name(p.name))
    return found
