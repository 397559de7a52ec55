"""Single sign-on fixtures: the provider on 127.0.0.1 (tests/sso/provider.py), Slipway configured for it,
and a person signing in through both with a plain HTTP client that follows redirects."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
import requests
from django.db import DEFAULT_DB_ALIAS, connections

from tests.sso.provider import Provider, running_provider

CLIENT_ID = "slipway-tests"


@pytest.fixture(scope="session")
def _provider_server():
    with running_provider() as provider:
        yield provider


@pytest.fixture
def provider(_provider_server) -> Provider:
    """The running provider, behaving (each test starts with its misbehaviour off)."""
    _provider_server.misbehaviour.reset()
    yield _provider_server
    _provider_server.misbehaviour.reset()


@pytest.fixture
def sso(settings, provider) -> Provider:
    """Slipway configured for the provider, as the SLIPWAY_OIDC_* variables would."""
    settings.SLIPWAY_OIDC_ISSUER = provider.issuer
    settings.SLIPWAY_OIDC_CLIENT_ID = CLIENT_ID
    settings.SLIPWAY_OIDC_CLIENT_SECRET = "tests-secret"
    settings.SLIPWAY_OIDC_NAME = "Example ID"
    settings.SLIPWAY_OIDC_GROUPS_CLAIM = "groups"
    settings.SLIPWAY_OIDC_GROUP_MAP = ()
    return provider


@dataclass
class Browserless:
    """A person's HTTP client: cookies per host, redirects followed (as a browser would)."""

    base: str
    http: requests.Session

    def csrf(self, path: str = "/login/") -> str:
        self.http.get(self.base + path, timeout=10).raise_for_status()
        return self.http.cookies["csrftoken"]  # the provider sets no cookie of this name

    def sign_in(self, sub: str) -> requests.Response:
        """The whole flow: Slipway's button, the provider's page, the subject chosen, back to Slipway."""
        token = self.csrf()
        at_provider = self.http.post(f"{self.base}/accounts/oidc/slipway/login/",
                                     data={"csrfmiddlewaretoken": token}, timeout=10)
        assert at_provider.status_code == 200 and 'name="sub"' in at_provider.text, at_provider.text[:500]
        # The provider's authorization page posts the chosen subject back to its own URL.
        return self.http.post(at_provider.url, data={"sub": sub}, timeout=10)

    def log_out(self) -> requests.Response:
        return self.http.post(f"{self.base}/logout/", data={"csrfmiddlewaretoken": self.http.cookies["csrftoken"]},
                              timeout=10)


@pytest.fixture
def person(live_server, monkeypatch):
    """A fresh client against the live server (``transactional_db`` comes with ``live_server``).

    The server's request threads close their database connections, so the test database can be dropped.
    """
    monkeypatch.setitem(connections.settings[DEFAULT_DB_ALIAS], "CONN_MAX_AGE", 0)
    with requests.Session() as http:
        yield Browserless(live_server.url, http)


def reason(response: requests.Response) -> str:
    """The sentence of the sign-in error page."""
    found = re.search(r'id="sso-reason">(.*?)</p>', response.text, re.S)
    assert found, response.text[:800]
    return found.group(1).replace("&#x27;", "'").replace("&quot;", '"').replace("&amp;", "&")
