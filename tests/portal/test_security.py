"""Content-Security-Policy and the deliberately public API docs (sign-in throttling: test_throttle.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

from portal.csp import POLICY

pytestmark = pytest.mark.django_db


def test_every_page_carries_the_policy_without_unsafe_script(client, member):
    client.force_login(member)
    for path in ("/", "/runs/", "/endpoints/", "/api/docs/", "/login/"):
        response = client.get(path)
        assert response["Content-Security-Policy"] == POLICY, path
    assert "script-src 'self'" in POLICY and "unsafe-eval" not in POLICY
    assert "'unsafe-inline'" not in POLICY.split("style-src-attr")[0]  # only style attributes may be inline


def test_the_portal_has_no_inline_script(client, member):
    client.force_login(member)
    html = client.get("/").content.decode()
    assert "<script>" not in html and "hx-on" not in html
    assert '"allowEval": false' in html  # htmx evaluates nothing


def test_the_api_docs_are_public_and_load_their_script_from_a_file():
    page = Client().get("/api/docs/").content.decode()
    assert "<script>" not in page.replace("<script></script>", "")
    assert Client().get("/api/schema/").status_code == 200


def test_no_template_has_an_inline_event_handler_or_script():
    """The policy would block them in the browser: behaviour lives in static/js."""
    templates = Path(__file__).resolve().parents[2] / "templates"
    offenders = [str(path) for path in templates.rglob("*.html")
                 if re.search(r"\son[a-z]+\s*=|<script>|hx-on", path.read_text())]
    assert offenders == []


# -- Cache-Control: no-store on what a signed-in caller gets -----------------------------------


def _no_store(response) -> bool:
    return "no-store" in response.get("Cache-Control", "")


def test_portal_pages_for_a_signed_in_user_are_not_stored(client, member):
    client.force_login(member)
    for path in ("/", "/runs/", "/teams/ml-research/", "/tokens/"):
        response = client.get(path)
        assert response.status_code == 200 and _no_store(response), path
        assert "private" in response["Cache-Control"]


def test_api_answers_to_a_bearer_token_are_not_stored(api_client_for, member):
    response = api_client_for(member).get("/api/v1/runs/")
    assert response.status_code == 200 and _no_store(response)
    refused = api_client_for(member).get("/api/v1/runs/999999/")  # an error answer carries data too
    assert refused.status_code == 404 and _no_store(refused)


def test_admin_console_pages_are_not_stored(client, staff):
    client.force_login(staff)
    for path in ("/admin/", "/admin/workloads/", "/admin/capacity/", "/admin/showback/"):
        response = client.get(path)
        assert response.status_code == 200 and _no_store(response), path


def test_anonymous_answers_keep_their_caching(client, db):
    for path in ("/api/schema/", "/api/docs/"):
        response = client.get(path)
        assert response.status_code == 200 and not _no_store(response), path
