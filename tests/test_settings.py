"""settings.py: every FMPI_* variable in one table, parsed once, bad values named."""

from __future__ import annotations

import re

import pytest

from fmpi import settings
from tests_support import REPO


def test_every_variable_the_code_reads_is_in_the_table():
    documented = {v.name for v in settings.VARIABLES}
    used = set()
    for path in (REPO / "src" / "fmpi").rglob("*.py"):
        used |= set(re.findall(r"FMPI_[A-Z][A-Z0-9_]*[A-Z0-9]", path.read_text()))
    knobs = {name for name in used if name.startswith("FMPI_COLL") and name != "FMPI_COLL_ALGO"}
    missing = used - documented - knobs - {"FMPI_DIR"}  # FMPI_DIR: a Python constant's name, not a variable
    assert not missing, f"FMPI_* names used in src/ but not in settings.VARIABLES: {sorted(missing)}"


def test_no_module_reads_an_fmpi_variable_from_the_environment_itself():
    offenders = []
    for path in (REPO / "src" / "fmpi").rglob("*.py"):
        if path.name == "settings.py" or path.parent.name == "rank" and path.name == "spec.py":
            continue  # the table, and the rank spec fmpirun writes (FMPI_JOB, FMPI_RANK, ...)
        text = path.read_text()
        if re.search(r"environ(?:\.get)?\(?\[?\s*[\"']FMPI_", text):
            offenders.append(str(path.relative_to(REPO)))
    assert not offenders, f"read FMPI_* through fmpi.settings instead: {offenders}"


def test_defaults_when_nothing_is_set():
    s = settings.read({})
    assert (s.channel, s.punch_timeout, s.op_timeout, s.shm, s.spin, s.coll_knobs) == ("auto", 3.0, None, True, None, {})


def test_values_are_parsed_into_their_types():
    s = settings.read({
        "FMPI_CHANNEL": "Relay", "FMPI_TIMEOUT": "2.5", "FMPI_RELAY_REJOIN": "0", "FMPI_SPIN_US": "250",
        "FMPI_SPIN_YIELD": "1", "FMPI_SHM": "0", "FMPI_COLL_SEGMENT": "64K", "FMPI_COLL_ALLREDUCE_RING_MIN": "1M",
        "FMPI_ERRORS": "abort", "FMPI_LAMBDA_ZIP_LIMIT": "1000",
    })
    assert s.channel == "relay" and s.op_timeout == 2.5 and s.relay_rejoin == 0.0
    assert s.spin == pytest.approx(250e-6) and s.spin_yield and not s.shm
    assert s.coll_knobs == {"segment": 65536, "allreduce_ring_min": 1 << 20}
    assert s.errors == "abort" and s.lambda_zip_limit == 1000


@pytest.mark.parametrize(
    "env, named",
    [
        ({"FMPI_CHANNEL": "bogus"}, "FMPI_CHANNEL must be one of auto, direct, punch, relay"),
        ({"FMPI_TIMEOUT": "soon"}, "FMPI_TIMEOUT must be a number of seconds"),
        ({"FMPI_TIMEOUT": "0"}, "FMPI_TIMEOUT must be a positive number of seconds"),
        ({"FMPI_RELAY_REJOIN": "-1"}, "FMPI_RELAY_REJOIN must be 0 or more seconds"),
        ({"FMPI_SHM": "no"}, "FMPI_SHM must be 0 (no shared-memory lanes) or 1"),
        ({"FMPI_SPIN_US": "-5"}, "FMPI_SPIN_US must be 0 or more microseconds"),
        ({"FMPI_COLL_SEGMENT": "big"}, "FMPI_COLL_SEGMENT='big': expected a number of bytes"),
        ({"FMPI_ERRORS": "loud"}, "FMPI_ERRORS must be one of exception, default, fatal, abort"),
        ({"FMPI_LAMBDA_ZIP_LIMIT": "0"}, "FMPI_LAMBDA_ZIP_LIMIT must be positive"),
    ],
)
def test_a_bad_value_is_one_error_that_names_the_variable(env, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        settings.read(env)


def test_current_is_read_once_and_reload_reads_again(monkeypatch):
    monkeypatch.setenv("FMPI_PUNCH_TIMEOUT", "7")
    assert settings.reload().punch_timeout == 7.0
    monkeypatch.setenv("FMPI_PUNCH_TIMEOUT", "8")
    assert settings.current().punch_timeout == 7.0  # read once
    assert settings.reload().punch_timeout == 8.0
    monkeypatch.delenv("FMPI_PUNCH_TIMEOUT")
    settings.reload()


def test_help_lists_every_variable():
    text = settings.help_text()
    assert all(v.name in text for v in settings.VARIABLES)
