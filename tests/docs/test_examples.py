"""The program shown in docs/getting-started.md is the file the doc commands run (docs/examples/hello.py)."""

import re

from tests_support import REPO


def test_getting_started_shows_the_example_file():
    doc = (REPO / "docs" / "getting-started.md").read_text()
    code = (REPO / "docs" / "examples" / "hello.py").read_text()
    assert f"```python\n{code}```" in doc


def test_readme_links_every_doc():
    readme = (REPO / "README.md").read_text()
    for doc in sorted((REPO / "docs").glob("*.md")):
        assert f"(docs/{doc.name})" in readme, f"README.md does not link docs/{doc.name}"


def test_the_environment_table_states_the_transports_real_defaults():
    from fmpi import settings
    from fmpi.transport.options import TransportOptions

    doc = (REPO / "docs" / "getting-started.md").read_text()
    rows = dict(re.findall(r"^\| `(FMPI_[A-Z_]+)` \| ([^|]+) \|", doc, re.M))
    defaults, parsed = TransportOptions(), settings.read({})
    checked = 0
    for var in settings.VARIABLES:
        stated = rows.get(var.name, "").strip()
        if re.fullmatch(r"[0-9.]+", stated):
            # Setting a variable to its documented default must change nothing.
            assert settings.read({var.name: stated}) == parsed, f"docs/getting-started.md says {var.name} defaults to {stated}"
            assert float(stated) == float(var.default), f"settings.VARIABLES gives {var.name} the default {var.default}"
            checked += 1
    for name in ("punch_timeout", "direct_timeout", "link_timeout", "resume_timeout", "heartbeat_timeout", "relay_rejoin"):
        assert getattr(parsed, name) == getattr(defaults, name), f"settings and TransportOptions disagree on {name}"
    assert checked >= 4
