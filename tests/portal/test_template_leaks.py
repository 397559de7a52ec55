"""No page prints template syntax: the checker every view test and browser test runs, and the pages
that once leaked a multi-line ``{# #}`` comment (each run row of the Runs list and Dashboard, and
the state poll that replaces it).
"""

from __future__ import annotations

import pytest

from jobs import services
from tests.jobs.conftest import run_payload
from tests.template_leaks import leak_report, template_leaks

pytestmark = pytest.mark.django_db


def test_the_checker_flags_each_delimiter_and_passes_clean_html():
    assert template_leaks("<p>{{ shown }} braces and 50 % } are fine</p>") == []
    for leak in ("{# note", "note #}", "{% if", "endif %}"):
        assert template_leaks(f"<td>{leak}</td>"), leak
    assert "GET /x" in leak_report("GET /x", "<td>{# a\n b #}</td>")


def test_run_rows_and_their_state_poll_print_no_template_comment(client, member, team, quota, fake_backend, published):
    fields = {k: v for k, v in run_payload().items() if k != "team"}
    run = services.submit_run(member, team, fields)
    client.force_login(member)
    pages = {path: client.get(path) for path in ("/", "/runs/", f"/runs/{run.pk}/state/")}
    for path, response in pages.items():
        html = response.content.decode()
        assert f'id="run-{run.pk}-state"' in html, path
        assert template_leaks(html) == [], path
