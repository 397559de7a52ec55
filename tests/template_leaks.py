"""The check that no page shows template syntax: ``{#``, ``#}``, ``{%`` or ``%}`` in served HTML.

Django's ``{# #}`` comment is single-line only: a comment spread over lines is printed as
text, and so is a tag broken over lines. Every HTML response the view tests render
(tests/conftest.py) and every page the browser tests visit (tests/browser/support.py) goes
through :func:`template_leaks`; a hit fails the test with the markup around it.
"""

from __future__ import annotations

import re

#: Template delimiters that never belong in served HTML (``{{``/``}}`` may, e.g. in an example shown).
LEAK = re.compile(r"\{#|#\}|\{%|%\}")
CONTEXT = 60


def template_leaks(html: str) -> list[str]:
    """Each leak as an excerpt of the markup around it (empty when the HTML is clean)."""
    return [html[max(0, m.start() - CONTEXT):m.end() + CONTEXT] for m in LEAK.finditer(html)]


def leak_report(where: str, html: str) -> str:
    """A failure message naming the page and quoting the first leaks, or '' when there is none."""
    leaks = template_leaks(html)
    if not leaks:
        return ""
    quoted = "\n".join(f"  …{excerpt}…" for excerpt in leaks[:3])
    return f"{where} shows template syntax ({len(leaks)} place(s)):\n{quoted}"
