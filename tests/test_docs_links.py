"""The README and the docs link only to files a clone has."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parent.parent

#: [text](target) and [text](target "title"), and <target> autolinks that are not URLs.
INLINE = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
AUTOLINK = re.compile(r"(?<!\()<([^>\s]+\.[A-Za-z0-9]+)>")
#: [label]: target reference definitions.
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)


def documents() -> list[Path]:
    found = [REPO / "README.md", *(REPO / name for name in ("DEVELOPERS.md", "BENCHMARKS.md")),
             *sorted((REPO / "docs").glob("**/*.md")), *sorted((REPO / "deploy").glob("**/*.md"))]
    return [path for path in found if path.exists()]


def relative_links(text: str) -> list[str]:
    # Code blocks and spans show commands and paths; they are not links.
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = INLINE.findall(text) + AUTOLINK.findall(text) + REFERENCE.findall(text)
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.IGNORECASE) and not t.startswith("#")]


def test_the_scan_finds_links():
    text = ('See [the API](docs/api.md#auth), [x](<a%20b.md>), [y](deploy/README.md "t"), <https://e.com>, '
            '[z](https://e.com/a.md), [top](#two-commands), `[not](code.md)`\n\n[ref]: ../shared/API.md\n')
    assert relative_links(text) == ["docs/api.md#auth", "a%20b.md", "deploy/README.md", "../shared/API.md"]


def test_the_readme_links_to_the_api_contract():
    assert "](docs/api.md)" in (REPO / "README.md").read_text()
    assert (REPO / "docs" / "api.md").read_text().startswith("# Slipway REST API v1")


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_points_at_a_file_in_the_repository(document):
    links = relative_links(document.read_text())
    broken = []
    for link in links:
        target = (document.parent / unquote(link.split("#", 1)[0])).resolve()
        if not target.is_relative_to(REPO) or not target.exists():
            broken.append(link)
    assert broken == []


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_document_points_outside_the_repository(document):
    """Not even as a path in prose: ``../shared/API.md`` exists on one machine, not in a clone."""
    assert not re.search(r"\.\./shared/|/work/", document.read_text())


#: A Markdown file named in text: ``docs/design.md``, ``api.md``, ``deploy/README.md`` (not a URL's path, nor a
#: string literal of code that builds a path: ``REPO / "docs" / "api.md"``).
CITED = re.compile(r"(?<![\w./:'\"-])((?:[\w-]+/)*[\w-]+\.md)\b")
#: Where code and docs cite from: every tracked source, template, script and document.
CITING = ("*.py", "*.html", "*.js", "*.css", "*.sh", "*.md", "*.yaml", "*.yml", "*.toml", "Makefile", "Dockerfile",
          ".ci/run")


def citing_files() -> list[Path]:
    import subprocess

    listed = subprocess.run(["git", "ls-files", "--", *CITING], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.split()
    # This module's own examples name files no clone has, on purpose.
    return [REPO / name for name in listed if not name.startswith(("static/vendor/", "tests/cluster/golden/"))
            and name != "tests/test_docs_links.py"]


def unresolved_citations(path: Path, text: str) -> list[str]:
    """The Markdown files ``text`` names that are neither beside ``path`` nor at that path from the repository's
    root (a clone's reader has no other place to look)."""
    return [name for name in CITED.findall(text)
            if not (path.parent / name).exists() and not (REPO / name).exists()]


def test_the_citation_scan_finds_what_a_clone_lacks(tmp_path):
    text = 'As docs/design.md "Layers" says (see api.md, NOWHERE.md §8, ../elsewhere/X.md, http://x/y/z.md).'
    assert CITED.findall(text) == ["docs/design.md", "api.md", "NOWHERE.md"]
    assert unresolved_citations(REPO / "docs" / "x.md", text) == ["NOWHERE.md"]
    assert unresolved_citations(REPO / "jobs" / "x.py", text) == ["api.md", "NOWHERE.md"]


def test_code_and_docs_cite_only_files_a_clone_has():
    """The design of record is docs/design.md and docs/architecture.md, the contract docs/api.md: a docstring
    citing a design or contract file a clone lacks sends its reader nowhere."""
    broken = {}
    for path in citing_files():
        missing = unresolved_citations(path, path.read_text(errors="replace"))
        if missing:
            broken[str(path.relative_to(REPO))] = sorted(set(missing))
    assert broken == {}
