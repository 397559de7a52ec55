"""Content-Security-Policy, sign-in throttling and the deliberately public API docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.cache import cache
from django.test import Client

from portal.csp import POLICY
from portal.throttle import MAX_FAILURES

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()
    yield
    cache.clear()


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


def test_sign_in_is_refused_for_a_while_after_repeated_failures(member):
    client = Client()
    for _ in range(MAX_FAILURES):
        assert client.post("/login/", {"username": "mia", "password": "wrong"}).status_code == 200
    blocked = client.post("/login/", {"username": "mia", "password": "slipway-test"})
    assert blocked.status_code == 429
    assert "Too many failed sign-ins" in blocked.content.decode()
    assert "_auth_user_id" not in client.session  # not even the right password gets in meanwhile


def test_a_successful_sign_in_resets_the_count(member):
    member.set_password("right-one")
    member.save()
    client = Client()
    for _ in range(MAX_FAILURES - 1):
        client.post("/login/", {"username": "mia", "password": "wrong"}, REMOTE_ADDR="10.0.0.1")
    assert client.post("/login/", {"username": "mia", "password": "right-one"}, REMOTE_ADDR="10.0.0.2").status_code == 302
    other = Client()
    assert other.post("/login/", {"username": "mia", "password": "wrong"}, REMOTE_ADDR="10.0.0.3").status_code == 200


def test_no_template_has_an_inline_event_handler_or_script():
    """The policy would block them in the browser: behaviour lives in static/js."""
    templates = Path(__file__).resolve().parents[2] / "templates"
    offenders = [str(path) for path in templates.rglob("*.html")
                 if re.search(r"\son[a-z]+\s*=|<script>|hx-on", path.read_text())]
    assert offenders == []
