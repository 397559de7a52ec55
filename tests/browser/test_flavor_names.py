"""Flavor names are identifiers: the pages show them as they are typed in a spec, never upper-cased (issue 46, F.10).

The "Which flavor?" page's table had every header cell upper-cased by the stylesheet (``th {
text-transform: uppercase }``), row headers too, so ``a100-1g.10gb`` read ``A100-1G.10GB``, a name no
spec, CLI or API call accepts. What a person reads is the rendered text, so a real browser checks it
(``innerText`` applies ``text-transform``).
"""

from __future__ import annotations

import pytest

from fleet.models import GpuFlavor
from tests.browser.support import BROWSER_MARKS
from tests.browser.test_forms import log_in

pytestmark = [*BROWSER_MARKS, pytest.mark.usefixtures("demo")]


def test_the_flavor_help_page_shows_flavor_names_as_they_are(live_server, browser):
    log_in(browser, live_server.url)
    browser.goto(f"{live_server.url}/help/flavors/")
    names = sorted(GpuFlavor.objects.values_list("name", flat=True))
    assert "a100-1g.10gb" in names
    shown = browser.eval_on_selector_all("#flavor-table tbody th[scope=row]", "cells => cells.map(c => c.innerText)")
    assert sorted(shown) == names
    # The column headers keep their small capitals: only the names changed.
    assert browser.eval_on_selector("#flavor-table thead th", "th => th.innerText") == "FLAVOR"
