"""Error pages: styled HTML with the navigation in the portal, the JSON error shape under /api/ in every mode."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from tests.factories import make_user

ERROR_URLS = "tests.portal.error_urls"
API_500 = {"errors": {"non_field_errors": ["Internal error: the failure was logged."]}}


def client_for(user=None) -> Client:
    client = Client(raise_request_exception=False)
    if user is not None:
        client.force_login(user)
    return client


def assert_styled_page(response, status: int) -> str:
    assert response.status_code == status
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert f'id="error-{status}"' in html
    assert "/static/css/slipway.css" in html
    return html


def nav_links(html: str) -> set[str]:
    return {href for href in ("/runs/", "/endpoints/", "/usage/", "/tokens/") if f'href="{href}"' in html}


@override_settings(DEBUG=False)
def test_it_answers_a_missing_portal_page_with_the_styled_404_and_navigation(member):
    response = client_for(member).get("/no-such-page/")
    html = assert_styled_page(response, 404)
    assert "Page not found" in html and "<code>/no-such-page/</code>" in html
    assert nav_links(html) == {"/runs/", "/endpoints/", "/usage/", "/tokens/"}
    assert 'aria-label="Main"' in html  # the base layout's top bar, with the team switcher
    assert "mia" in html


@override_settings(DEBUG=False)
def test_it_answers_an_object_the_user_may_not_see_with_the_styled_404(outsider):
    assert_styled_page(client_for(outsider).get("/runs/999999/"), 404)


@override_settings(DEBUG=False)
def test_it_offers_sign_in_on_a_404_for_visitors(db):
    html = assert_styled_page(client_for().get("/no-such-page/"), 404)
    assert 'href="/login/"' in html and 'href="/"' in html


@override_settings(DEBUG=False)
def test_it_answers_a_too_low_role_with_the_styled_403_and_navigation(viewer):
    response = client_for(viewer).post("/endpoints/preview/", {})
    html = assert_styled_page(response, 403)
    assert "Not allowed" in html
    assert nav_links(html) == {"/runs/", "/endpoints/", "/usage/", "/tokens/"}


@override_settings(DEBUG=False, ROOT_URLCONF=ERROR_URLS)
def test_it_answers_a_portal_bug_with_the_styled_500_and_navigation(member):
    response = client_for(member).get("/boom/")
    html = assert_styled_page(response, 500)
    assert "Something went wrong" in html
    assert nav_links(html) == {"/runs/", "/endpoints/", "/usage/", "/tokens/"}


@override_settings(DEBUG=False, ROOT_URLCONF=ERROR_URLS)
def test_the_500_page_needs_no_request_context(member, monkeypatch):
    def broken(request):
        raise RuntimeError("the database is gone")

    # Every page's context processor fails (as it would with the database down): the 500 page
    # does not use it, so it still renders with its navigation.
    monkeypatch.setattr("front.context_processors.slipway", broken)
    html = assert_styled_page(client_for(member).get("/boom/"), 500)
    assert nav_links(html) == {"/runs/", "/endpoints/", "/usage/", "/tokens/"}


@pytest.mark.parametrize("debug", [False, True])
def test_an_unknown_api_path_answers_json_404(db, debug, settings):
    settings.DEBUG = debug
    response = client_for().get("/api/v1/nonexistent/")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"errors": {"detail": ["Not found."]}}


@pytest.mark.parametrize("debug", [False, True])
def test_an_api_bug_answers_json_500_in_every_mode(db, debug, settings):
    settings.DEBUG = debug
    settings.ROOT_URLCONF = ERROR_URLS
    response = client_for().get("/api/v1/boom/")
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert response.json() == API_500


@pytest.mark.parametrize("debug", [False, True])
def test_a_django_permission_error_under_the_api_answers_json_403(db, debug, settings):
    settings.DEBUG = debug
    settings.ROOT_URLCONF = ERROR_URLS
    response = client_for().get("/api/v1/forbidden/")
    assert response.status_code == 403
    assert response.json() == {"errors": {"detail": ["You do not have permission to perform this action."]}}


@override_settings(DEBUG=True)
def test_debug_mode_the_demo_still_answers_a_missing_page_with_the_portals_404(member):
    html = assert_styled_page(client_for(member).get("/no-such-page/"), 404)
    assert "Page not found" in html and "Using the URLconf" not in html and "urlpatterns" not in html
    assert nav_links(html) == {"/runs/", "/endpoints/", "/usage/", "/tokens/"}


@override_settings(DEBUG=True)
def test_debug_mode_an_object_the_user_may_not_see_gets_the_portals_404(outsider):
    html = assert_styled_page(client_for(outsider).get("/runs/999999/"), 404)
    assert "Technical" not in html and "Raised by" not in html


@override_settings(DEBUG=True)
def test_debug_mode_a_too_low_role_gets_the_portals_403(viewer):
    assert "Not allowed" in assert_styled_page(client_for(viewer).post("/endpoints/preview/", {}), 403)


@override_settings(DEBUG=True, ROOT_URLCONF=ERROR_URLS)
def test_debug_mode_a_portal_bug_gets_the_portals_500_and_the_traceback_is_logged(member, caplog):
    html = assert_styled_page(client_for(member).get("/boom/"), 500)
    assert "Something went wrong" in html and "Traceback" not in html
    logged = [r for r in caplog.records if r.name == "django.request" and r.status_code == 500]
    assert logged and logged[0].exc_info[0] is RuntimeError


@override_settings(DEBUG=True, SLIPWAY_TECHNICAL_ERROR_PAGES=True)
def test_a_developer_can_ask_for_djangos_technical_pages(db):
    response = client_for().get("/no-such-page/")
    assert response.status_code == 404 and "Using the URLconf" in response.content.decode()


def test_api_json_errors_keep_their_own_messages(api_client_for, db):
    user = make_user("nobody")
    response = api_client_for(user).get("/api/v1/runs/999999/")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert "errors" in response.json()


@override_settings(DEBUG=False)
def test_a_stale_form_gets_the_styled_403_with_a_hint(member):
    client = Client(enforce_csrf_checks=True, raise_request_exception=False)
    client.force_login(member)
    response = client.post("/team/switch/", {"team": "ml-research"})
    html = assert_styled_page(response, 403)
    assert "This form was out of date" in html
    assert nav_links(html) == {"/runs/", "/endpoints/", "/usage/", "/tokens/"}
