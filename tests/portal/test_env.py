"""The typed environment helpers in ``portal.env``: values, defaults and loud failures."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_float, env_int, env_list, env_str, env_trusted_proxies, parse_database_url


@pytest.mark.parametrize(("raw", "expected"), [
    ("1", True), ("true", True), ("TRUE", True), (" yes ", True), ("on", True),
    ("0", False), ("false", False), ("No", False), ("off", False), ("", False),
])
def test_it_reads_booleans(monkeypatch, raw, expected):
    monkeypatch.setenv("SLIPWAY_X", raw)
    assert env_bool("SLIPWAY_X", not expected) is expected


def test_it_uses_the_default_when_a_variable_is_unset(monkeypatch):
    monkeypatch.delenv("SLIPWAY_X", raising=False)
    assert env_bool("SLIPWAY_X", True) is True
    assert env_int("SLIPWAY_X", 7) == 7
    assert env_float("SLIPWAY_X", 2.5) == 2.5
    assert env_str("SLIPWAY_X", "dflt") == "dflt"
    assert env_list("SLIPWAY_X", ["a"]) == ["a"]
    assert env_list("SLIPWAY_X") == []


def test_it_names_the_variable_when_a_boolean_is_invalid(monkeypatch):
    monkeypatch.setenv("SLIPWAY_X", "maybe")
    with pytest.raises(ImproperlyConfigured, match=r"SLIPWAY_X.*'maybe'"):
        env_bool("SLIPWAY_X")


def test_it_reads_integers_and_numbers(monkeypatch):
    monkeypatch.setenv("SLIPWAY_I", " 42 ")
    monkeypatch.setenv("SLIPWAY_F", "0.25")
    assert env_int("SLIPWAY_I", 0) == 42
    assert env_float("SLIPWAY_F", 0.0) == 0.25


def test_it_treats_an_empty_number_as_unset(monkeypatch):
    monkeypatch.setenv("SLIPWAY_I", "")
    assert env_int("SLIPWAY_I", 5) == 5
    assert env_float("SLIPWAY_I", 1.5) == 1.5


@pytest.mark.parametrize(("helper", "raw"), [(env_int, "12abc"), (env_int, "1.5"), (env_float, "fast")])
def test_it_rejects_malformed_numbers(monkeypatch, helper, raw):
    monkeypatch.setenv("SLIPWAY_N", raw)
    with pytest.raises(ImproperlyConfigured, match="SLIPWAY_N"):
        helper("SLIPWAY_N", 0)


def test_it_splits_lists_and_drops_blanks(monkeypatch):
    monkeypatch.setenv("SLIPWAY_L", " a.example.com, ,b.example.com,")
    assert env_list("SLIPWAY_L", ["default"]) == ["a.example.com", "b.example.com"]
    monkeypatch.setenv("SLIPWAY_L", "")
    assert env_list("SLIPWAY_L", ["default"]) == []  # set but empty means "none", not the default


def test_it_parses_a_postgres_url():
    db = parse_database_url("postgres://sli%40way:p%2Fss@db.internal:6432/portal?sslmode=require&connect_timeout=5")
    assert db == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "portal",
        "USER": "sli@way",
        "PASSWORD": "p/ss",
        "HOST": "db.internal",
        "PORT": "6432",
        "OPTIONS": {"sslmode": "require", "connect_timeout": "5"},
    }


def test_it_fills_postgres_defaults():
    db = parse_database_url("postgresql://localhost")
    assert (db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == ("postgres", "", "", "localhost", "")


@pytest.mark.parametrize(("url", "name"), [
    ("sqlite:////var/lib/slipway/db.sqlite3", "/var/lib/slipway/db.sqlite3"),
    ("sqlite:///var/db.sqlite3", "var/db.sqlite3"),
    ("sqlite://", ":memory:"),
])
def test_it_parses_sqlite_urls(url, name):
    assert parse_database_url(url) == {"ENGINE": "django.db.backends.sqlite3", "NAME": name}


@pytest.mark.parametrize("url", ["mysql://root@localhost/db", "db.sqlite3", "http://example.com/"])
def test_it_rejects_unsupported_database_urls(url):
    with pytest.raises(ImproperlyConfigured, match="not supported"):
        parse_database_url(url)


def test_it_rejects_a_database_url_with_a_bad_port():
    with pytest.raises(ImproperlyConfigured, match="invalid port"):
        parse_database_url("postgres://u:pw@db:fivefour/slipway")


@pytest.mark.parametrize(("raw", "parsed"), [
    (None, 0), ("", 0), ("1", 1), ("2", 2),
    ("10.2.0.0/16, 192.0.2.7", ("10.2.0.0/16", "192.0.2.7/32")),
    ("fd00::/8", ("fd00::/8",)),
])
def test_trusted_proxies_are_a_count_or_a_list_of_networks(monkeypatch, raw, parsed):
    if raw is None:
        monkeypatch.delenv("SLIPWAY_P", raising=False)
    else:
        monkeypatch.setenv("SLIPWAY_P", raw)
    assert env_trusted_proxies("SLIPWAY_P") == parsed


@pytest.mark.parametrize("raw", ["10.0.0.0/8, ingress", "²", "9" * 5000])
def test_a_trusted_proxy_that_is_no_address_fails_loudly(monkeypatch, raw):
    # "²" passed isdigit() and 5,000 digits went to int(): both were a ValueError of Python's, not this setting's.
    monkeypatch.setenv("SLIPWAY_P", raw)
    with pytest.raises(ImproperlyConfigured, match="SLIPWAY_P"):
        env_trusted_proxies("SLIPWAY_P")
