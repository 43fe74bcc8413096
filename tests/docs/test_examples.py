"""The program shown in docs/getting-started.md is the file the doc commands run (docs/examples/hello.py)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_getting_started_shows_the_example_file():
    doc = (REPO / "docs" / "getting-started.md").read_text()
    code = (REPO / "docs" / "examples" / "hello.py").read_text()
    assert f"```python\n{code}```" in doc


def test_readme_links_every_doc():
    readme = (REPO / "README.md").read_text()
    for doc in sorted((REPO / "docs").glob("*.md")):
        assert f"(docs/{doc.name})" in readme, f"README.md does not link docs/{doc.name}"
