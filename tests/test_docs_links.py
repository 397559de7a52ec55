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
