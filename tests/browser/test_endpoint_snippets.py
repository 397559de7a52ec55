"""The endpoint page's Copy buttons in a real browser: the clipboard then holds the URL, or the snippet exactly as
inference/snippets.py wrote it (the page's HTML escaping undone by the browser, nothing else changed)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from inference import services
from inference.snippets import snippets
from quotas.demo import seed_flavors, seed_team_quotas
from teams.models import Role
from tests.browser.support import BROWSER_MARKS, LAPTOP
from tests.e2e.conftest import wait_for
from tests.factories import add_member, make_team, make_user
from tests.inference.conftest import endpoint_payload

PASSWORD = "pw-Slipway-123"
MODEL = "it's <b>\"chat\"</b> & $(id)"

pytestmark = [*BROWSER_MARKS, pytest.mark.browser_page(viewport=LAPTOP)]


def test_the_copy_buttons_put_the_url_and_each_snippet_on_the_clipboard(transactional_db, browser, live_server,
                                                                         monkeypatch, settings):
    settings.SLIPWAY_GATEWAY_URL = "https://api.example.com"
    monkeypatch.setattr("core.queueing.publish", lambda task, *args, **kwargs: True)
    team = make_team("ml-research", "ML Research")
    mia = make_user("mia", password=PASSWORD)
    add_member(team, mia, Role.MEMBER)
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 4}, Decimal("10000"))
    endpoint = services.create_endpoint(mia, team, endpoint_payload(name="chat", env={"SLIPWAY_SIM_MODEL": MODEL}))
    browser.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    browser.goto(f"{live_server.url}/login/")
    browser.fill("#id_username", "mia")
    browser.fill("#id_password", PASSWORD)
    browser.click("button[type=submit]")
    browser.wait_for_url(f"{live_server.url}/")
    browser.goto(f"{live_server.url}/endpoints/{endpoint.pk}/")

    def copied(button: str, expected: str) -> None:
        browser.click(f'button[data-copy="{button}"]')
        wait_for(lambda: browser.evaluate("navigator.clipboard.readText()") == expected, timeout=10, interval=0.1,
                 what=f"{button} on the clipboard")

    copied("endpoint-url", "https://api.example.com/ml-research/chat")
    for snippet in snippets(endpoint.url, MODEL):
        copied(f"snippet-{snippet.slug}", snippet.text)
