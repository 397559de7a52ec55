"""``slipway`` and its client against answers a live server does not give: another server's address, a redirect
or a proxy's HTML page, a gateway error on a create, a 429, an empty log window, pages that shift, a config file
that is not what ``login`` writes. The server is an ``httpx.MockTransport``; nothing sleeps."""

from __future__ import annotations

import json
import tomllib

import httpx
import pytest
from click.testing import CliRunner

from slipway import config, login, polling
from slipway.cli import cli as slipway_cli
from slipway.client import Client, NotJson, RateLimited

URL = "https://slipway.test"
RUN = {"id": 7, "name": "bert", "state": "admitted", "reason": "", "is_final": False}


def page(results, next_url=None) -> dict:
    return {"count": len(results), "next": next_url, "previous": None, "results": results}


@pytest.fixture
def server(monkeypatch, tmp_path):
    """``server.answer``: the handler (request → response); ``server.seen``: the requests; ``server.invoke(*args,
    **env)``: the command's Result, connected by ``SLIPWAY_URL``/``SLIPWAY_TOKEN`` unless ``env`` says otherwise."""

    class Server:
        seen: list[httpx.Request] = []
        answer = staticmethod(lambda request: httpx.Response(200, json=page([])))

        @staticmethod
        def invoke(*args, input=None, **env):
            environment = {"SLIPWAY_URL": URL, "SLIPWAY_TOKEN": "tok", "XDG_CONFIG_HOME": str(tmp_path / "config"),
                           "SLIPWAY_PROFILE": None, **env}
            return CliRunner().invoke(slipway_cli, list(args), env=environment, input=input, catch_exceptions=False)

    def handle(request):
        Server.seen.append(request)
        return Server.answer(request)

    def client(url, token, **kwargs):
        return Client(url, token, transport=httpx.MockTransport(handle), backoff=(0, 0, 0), wait=lambda _s: None)

    monkeypatch.setattr(config, "Client", client)
    monkeypatch.setattr(login, "Client", client)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return Server


def write_config(text: str | bytes):
    path = config.config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return path


# -- 1. a profile's token goes to its own server only -----------------------------------------------------------


PROFILES = """[profiles.default]
url = "https://prod.example.com"
token = "prod-token"

[profiles.staging]
url = "https://staging.example.com/"
token = "staging-token"
"""


@pytest.mark.parametrize(("url", "sent"), [
    ("https://staging.example.com", "Bearer staging-token"),  # the profile whose server it is
    ("https://PROD.example.com:443/", "Bearer prod-token"),  # the chosen profile's server, written otherwise
    ("http://prod.example.com", None),  # not its server: the token never goes in clear text
    ("https://evil.example.com", None),
])
def test_slipway_url_takes_only_the_token_of_a_profile_for_that_server(server, url, sent):
    write_config(PROFILES)
    server.answer = lambda request: (httpx.Response(200, json=page([])) if request.headers.get("Authorization")
                                     else httpx.Response(401, json={"errors": {"detail": ["no"]}}))
    result = server.invoke("ps", SLIPWAY_URL=url, SLIPWAY_TOKEN=None)
    assert [request.headers.get("Authorization") for request in server.seen] == [sent]
    if sent is None:
        assert result.exit_code == 3
        assert f"not signed in to {url}" in result.stderr and f"slipway login --url {url}" in result.stderr
        assert "SLIPWAY_TOKEN" in result.stderr
    else:
        assert result.exit_code == 0, result.output


def test_slipway_token_goes_with_slipway_url_and_the_profile_alone_with_its_url(server):
    write_config(PROFILES)
    assert server.invoke("ps", SLIPWAY_URL="https://other.example.com", SLIPWAY_TOKEN="ci").exit_code == 0
    assert server.invoke("--profile", "staging", "ps", SLIPWAY_URL=None, SLIPWAY_TOKEN=None).exit_code == 0
    assert [(str(r.url.host), r.headers["Authorization"]) for r in server.seen] == [
        ("other.example.com", "Bearer ci"), ("staging.example.com", "Bearer staging-token")]


def test_slipway_token_without_slipway_url_goes_nowhere(server):
    """It went to the chosen profile's server: a CI job's staging token sent to a developer's production profile."""
    write_config(PROFILES)
    result = server.invoke("--profile", "staging", "ps", SLIPWAY_URL=None, SLIPWAY_TOKEN="ci")
    assert result.exit_code == 2 and server.seen == []
    assert ("SLIPWAY_TOKEN is set without SLIPWAY_URL: set SLIPWAY_URL to the server the token is for (it is not "
            "sent to the profile's https://staging.example.com/)") in result.stderr


@pytest.mark.parametrize("ref", ["²", "9" * 5000], ids=["superscript", "5000-digits"])
def test_a_ref_that_is_no_id_is_looked_up_as_a_name_not_a_traceback(server, ref):
    """isdigit() took "²" and int() refused it; int() refuses 5,000 digits: both were a traceback. Neither is an id."""
    for args in (("describe", ref), ("endpoint", "keys", "revoke", "--team", "ml-research", ref)):
        server.seen.clear()
        result = server.invoke(*args)
        assert result.exit_code == 4, result.output
        assert server.seen and all(request.url.params.get("name", ref) == ref for request in server.seen)


def test_a_retry_after_that_is_no_number_is_none():
    from slipway.client import retry_after

    # A header's bytes are read as latin-1: the byte 0xB2 is "²", which isdigit() takes and float() refuses.
    assert retry_after(httpx.Response(429, headers=[(b"Retry-After", "²".encode("latin-1"))])) is None
    assert retry_after(httpx.Response(429, headers={"Retry-After": "30"})) == 30.0


# -- 2. an answer that is not the API's JSON ------------------------------------------------------------------


def test_a_redirect_names_where_it_points_and_the_address_to_use(server):
    server.answer = lambda request: httpx.Response(301, headers={"Location": str(request.url.copy_with(
        scheme="https"))})
    result = server.invoke("ps", SLIPWAY_URL="http://slipway.test")
    assert result.exit_code == 1
    assert "http://slipway.test/api/v1/runs/" in result.stderr and "301 Moved Permanently" in result.stderr
    assert "a redirect to https://slipway.test/api/v1/runs/" in result.stderr
    assert "use https://slipway.test as the URL" in result.stderr.replace("\n", " ")


def test_a_proxys_html_page_is_named_not_a_traceback(server):
    server.answer = lambda request: httpx.Response(200, html="<html>Sign in to the proxy</html>")
    result = server.invoke("describe", "7")
    assert result.exit_code == 1
    assert f"{URL}/api/v1/runs/7/ answered 200 OK with text/html, not the API's JSON" in result.stderr


def test_login_with_a_redirect_says_which_url_to_use(server):
    server.answer = lambda request: httpx.Response(302, headers={"Location": "https://portal.test/api/v1/teams/"})
    result = server.invoke("login", "--url", "http://slipway.test", "--token", "t", SLIPWAY_URL=None)
    assert result.exit_code == 1
    assert "use https://portal.test as the URL" in result.stderr.replace("\n", " ")
    assert not config.config_path().exists()


def test_a_204_needs_no_body_and_csv_is_not_json():
    answers = iter([httpx.Response(204), httpx.Response(200, text="hour,key\n")])
    client = Client(URL, "t", transport=httpx.MockTransport(lambda request: next(answers)))
    client.cancel_reservation(3)
    assert client.key_usage(team="ml", csv=True) == "hour,key\n"
    with pytest.raises(NotJson):
        Client(URL, "t", transport=httpx.MockTransport(lambda r: httpx.Response(200, text="ok"))).teams()


# -- 3. a create whose outcome is unknown names its key ---------------------------------------------------------


def run_spec(tmp_path) -> str:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"team": "ml", "name": "bert", "image": "i", "command": ["x"], "flavor": "a100"}))
    return str(path)


CREATES = {
    "run": lambda tmp: ["run", "-f", run_spec(tmp)],
    "endpoint": lambda tmp: ["endpoint", "create", "-f", run_spec(tmp)],
    "workspace": lambda tmp: ["workspace", "create", "--team", "ml", "--name", "nb", "--flavor", "a100"],
    "reservation": lambda tmp: ["reserve", "create", "--team", "ml", "--flavor", "a100", "--units", "1",
                                "--start", "2030-01-07T09:00", "--end", "2030-01-07T10:00", "--name", "r"],
    "sweep": lambda tmp: ["sweep", "create", "-f", run_spec(tmp)],
}


def gateway_error(status):
    return lambda request: httpx.Response(status, text=f"<html>{status}</html>")


def unreachable(request):
    raise httpx.ConnectError("refused")


def no_answer_in_time(request):
    raise httpx.ReadTimeout("read timed out")


@pytest.mark.parametrize("noun", CREATES)
@pytest.mark.parametrize("answer", [gateway_error(502), gateway_error(503), gateway_error(504), unreachable,
                                    no_answer_in_time])
def test_a_create_whose_outcome_is_unknown_names_its_key_and_the_rerun(server, tmp_path, noun, answer):
    server.answer = answer
    result = server.invoke(*CREATES[noun](tmp_path))
    assert result.exit_code == 1, result.output
    key = server.seen[-1].headers["Idempotency-Key"]
    assert f"rerun the same command with --idempotency-key {key} to retry without creating a second {noun}" in (
        result.stderr.replace("\n", " "))
    assert len(server.seen) == 1  # a write is never resent by itself


@pytest.mark.parametrize("noun", CREATES)
def test_every_create_sends_the_key_it_is_given(server, tmp_path, noun):
    server.answer = gateway_error(502)
    result = server.invoke(*CREATES[noun](tmp_path), "--idempotency-key", "mine-1")
    assert server.seen[-1].headers["Idempotency-Key"] == "mine-1"
    assert "--idempotency-key mine-1 " in result.stderr


def test_a_refusal_is_no_unknown_outcome(server, tmp_path):
    server.answer = lambda request: httpx.Response(409, json={"errors": {"detail": ["busy"]}})
    result = server.invoke(*CREATES["reservation"](tmp_path))
    assert result.exit_code == 1 and "busy" in result.stderr and "idempotency" not in result.stderr


# -- 4. logs -f after an empty window ---------------------------------------------------------------------------


def test_following_a_log_prints_only_new_lines_after_an_empty_window():
    """The cluster away for a poll: the API answers ``lines: []``; the next window is no new log."""
    windows = iter([["a", "b"], [], ["a", "b", "c"], ["a", "b", "c", "d"]])
    states = iter([False, False, True])

    def api(request):
        if request.url.path.endswith("/logs/"):
            return httpx.Response(200, json={"lines": next(windows), "pod": "p", "pods": ["p"]})
        return httpx.Response(200, json={**RUN, "is_final": next(states)})

    client = Client(URL, "t", transport=httpx.MockTransport(api))
    assert list(client.log_lines(7, tail=10, follow=True, wait=lambda _s: None)) == ["a", "b", "c", "d"]


# -- 5. the config file -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "said"), [
    (b'[profiles.default]\nurl = "caf\xe9"\n', "not UTF-8 text (byte 30 cannot be read)"),
    ('profiles = "prod"\n', "`profiles` must be a table of profiles"),
    ('[profiles]\ndefault = "https://prod.example.com"\n', "profile 'default' must be a table"),
    ('[profiles.default]\nurl = 1\n', "profile 'default' must be a table"),
])
def test_a_config_file_that_cannot_be_used_is_named_not_a_traceback(server, text, said):
    path = write_config(text)
    result = server.invoke("ps", SLIPWAY_URL=None, SLIPWAY_TOKEN=None)
    assert result.exit_code == 1 and result.stderr.startswith(f"Error: {path}: {said}"), result.stderr
    assert server.seen == []


def test_writing_a_profile_keeps_the_rest_of_the_file():
    write_config('editor = "vim"\nretries = 3\n\n[aliases]\nls = ["ps", "-o", "wide"]\n\n[aliases.deep]\nx = 1.5\n\n'
                 '[profiles.default]\nurl = "https://prod.example.com"\ntoken = "prod-token"\n')
    path = config.write_profile('st"a\u00e9\U0001f680', "https://staging.example.com", "s\x7ft")
    written = tomllib.loads(path.read_text(encoding="utf-8"))
    assert written == {
        "editor": "vim", "retries": 3, "aliases": {"ls": ["ps", "-o", "wide"], "deep": {"x": 1.5}},
        "profiles": {"default": {"url": "https://prod.example.com", "token": "prod-token"},
                     'st"a\u00e9\U0001f680': {"url": "https://staging.example.com", "token": "s\x7ft"}},
    }


# -- 6. a number JSON cannot carry ------------------------------------------------------------------------------


@pytest.mark.parametrize(("number", "said"), [
    ("1e999", "run.max_runtime_minutes is too large a number for JSON"),
    ("9" * 5000, "run.max_runtime_minutes is an integer of 5,000 digits"),
])
def test_a_spec_number_json_cannot_carry_is_exit_2_naming_the_field(server, tmp_path, number, said):
    path = tmp_path / "sweep.json"
    path.write_text('{"team": "ml", "run": {"image": "i", "max_runtime_minutes": ' + number + "}}")
    result = server.invoke("sweep", "create", "-f", str(path))
    assert result.exit_code == 2 and result.stderr.startswith(f"Error: {path}: {said}"), result.stderr
    assert server.seen == []


# -- 7. ps over shifting pages; Ctrl-C in run --watch -----------------------------------------------------------


def test_ps_lists_each_run_once_when_one_is_submitted_while_it_pages(server):
    """Page 1 is read, a run is submitted, page 2 begins with what page 1 ended with."""
    rows = [{**RUN, "id": n, "name": f"r{n}", "team": "ml", "flavor": "a100", "gpus_per_worker": 1, "workers": 1,
             "created_at": "2030-01-01T00:00:00Z"} for n in (3, 2, 1)]
    server.answer = lambda request: httpx.Response(200, json=(
        page(rows[1:3]) if request.url.params.get("page") == "2" else page(rows[0:2], f"{URL}/api/v1/runs/?page=2")))
    result = server.invoke("ps", "--limit", "0", "-o", "json")
    assert [run["id"] for run in json.loads(result.stdout)] == [3, 2, 1]


def test_ctrl_c_in_run_watch_exits_130_not_the_failed_runs_1(server, tmp_path, monkeypatch):
    server.answer = lambda request: httpx.Response(201 if request.method == "POST" else 200, json=RUN)

    def ctrl_c(_seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(polling, "pause", ctrl_c)
    result = server.invoke("run", "-f", run_spec(tmp_path), "--watch")
    assert result.exit_code == 130
    assert result.stderr == "Error: stopped watching run 7; it goes on (`slipway describe 7`, `slipway cancel 7`)\n"
    assert "130" in server.invoke("--help").stdout


# -- 8. a 429 -------------------------------------------------------------------------------------------------


def rate_limited_then(answer, retry_after="2", times=1):
    calls = []

    def api(request):
        calls.append(request)
        if len(calls) <= times:
            return httpx.Response(429, headers={"Retry-After": retry_after}, json={"errors": {"detail": ["slow"]}})
        return answer

    return api, calls


def test_a_429_is_retried_after_retry_after_for_reads_and_keyed_writes_only():
    waits = []
    api, calls = rate_limited_then(httpx.Response(200, json=page([])))
    assert Client(URL, "t", transport=httpx.MockTransport(api), wait=waits.append).teams() == []
    assert len(calls) == 2 and waits == [2.0]
    api, calls = rate_limited_then(httpx.Response(201, json=RUN))
    assert Client(URL, "t", transport=httpx.MockTransport(api), wait=waits.append).submit_run({})["id"] == 7
    assert len(calls) == 2 and calls[0].headers["Idempotency-Key"] == calls[1].headers["Idempotency-Key"]
    api, calls = rate_limited_then(httpx.Response(201, json={"id": 1}))  # a key's creation carries no key
    with pytest.raises(RateLimited):
        Client(URL, "t", transport=httpx.MockTransport(api), wait=waits.append).create_key("k", team="ml")
    assert len(calls) == 1 and waits == [2.0, 2.0]


def test_a_429_is_retried_a_bounded_number_of_times_and_never_past_a_minute():
    waits = []
    api, calls = rate_limited_then(httpx.Response(200, json=page([])), times=99)
    with pytest.raises(RateLimited) as limited:
        Client(URL, "t", transport=httpx.MockTransport(api), wait=waits.append, backoff=(1, 1, 1)).teams()
    assert len(calls) == 4 and waits == [2.0, 2.0, 2.0] and limited.value.retry_after == 2.0
    api, calls = rate_limited_then(httpx.Response(200, json=page([])), retry_after="3600")
    with pytest.raises(RateLimited):
        Client(URL, "t", transport=httpx.MockTransport(api), wait=waits.append).teams()
    assert len(calls) == 1
    api, calls = rate_limited_then(httpx.Response(200, json=page([])), retry_after="Wed, 21 Oct 2015 07:28:00 GMT")
    assert Client(URL, "t", transport=httpx.MockTransport(api), wait=waits.append).teams() == []
    assert waits[-1] == 0.0  # a date already past: at once
