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
    from fmpi.transport.options import _ENV, TransportOptions

    doc = (REPO / "docs" / "getting-started.md").read_text()
    rows = dict(re.findall(r"^\| `(FMPI_[A-Z_]+)` \| ([^|]+) \|", doc, re.M))
    defaults = TransportOptions()
    checked = 0
    for name, var in _ENV.items():
        stated = rows.get(var, "").strip()
        if re.fullmatch(r"[0-9.]+", stated):
            assert float(stated) == getattr(defaults, name), f"docs/getting-started.md says {var} defaults to {stated}"
            checked += 1
    assert checked >= 4
