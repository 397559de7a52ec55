"""The endpoint page's URL and ready-to-paste snippets (inference/snippets.py): each one runs as pasted — the
shell snippets in a real bash, the Python ones with a recording stand-in of the ``openai`` module — and says
exactly the endpoint's URL, the key variable and the served model, whatever characters the model name holds;
the page shows them HTML-escaped."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
import types

import pytest

from inference import services
from inference.models import InferenceEndpoint
from inference.snippets import KEY_ENV, PROMPT, snippets
from tests.inference.conftest import endpoint_payload

#: A model name a user may well set (SLIPWAY_SIM_MODEL is free text), with every quote and expansion a shell,
#: Python or HTML would act on, and a character outside the BMP.
NASTY = "it's \"a\" <b>&amp; $(touch pwned) `id` ${HOME} \\n 😀"
URL = "https://api.example.com/ml-research/chat"


def _run_curl(text: str, tmp_path) -> list[str]:
    """The snippet run by bash with ``curl`` a function printing its arguments as bash passed them."""
    script = ("curl() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' \"$@\"; }\n" + text)
    done = subprocess.run([shutil.which("bash"), "-c", script], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", KEY_ENV: "sw-secret"}, timeout=30)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "pwned").exists()  # the name's $(...) was not run
    return json.loads(done.stdout)


@pytest.mark.parametrize("model", ["tiny-llama", NASTY])
def test_the_curl_snippets_send_the_model_the_key_and_the_stream_flag(model, tmp_path):
    plain, streaming = (s.text for s in snippets(URL, model)[:2])
    for text, stream in ((plain, False), (streaming, True)):
        argv = _run_curl(text, tmp_path)
        assert argv[argv.index("-H") + 1] == "Authorization: Bearer sw-secret"  # the shell filled the key in
        assert "Content-Type: application/json" in argv
        assert (argv[0] == "-N") is stream  # no buffering: tokens show as they come
        assert f"{URL}/v1/chat/completions" in argv
        body = json.loads(argv[argv.index("-d") + 1])
        assert body["model"] == model and body["messages"] == [{"role": "user", "content": PROMPT}]
        assert body.get("stream", False) is stream


class _Recorder:
    """The part of ``openai.OpenAI`` the snippets use, recording what they pass."""

    calls: list = []

    def __init__(self, **kwargs) -> None:
        self.calls.append(("client", kwargs))
        self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=self._create))

    def _create(self, **kwargs):
        self.calls.append(("create", kwargs))
        delta = types.SimpleNamespace(content="Hello")
        if kwargs.get("stream"):
            return iter([types.SimpleNamespace(choices=[types.SimpleNamespace(delta=delta)])])
        return types.SimpleNamespace(choices=[types.SimpleNamespace(message=delta)])


@pytest.mark.parametrize("model", ["tiny-llama", NASTY])
def test_the_python_snippets_run_with_the_base_url_the_key_and_the_model(model, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "openai", types.SimpleNamespace(OpenAI=_Recorder))
    monkeypatch.setenv(KEY_ENV, "sw-secret")
    for snippet, stream in zip(snippets(URL, model)[2:], (False, True), strict=True):
        _Recorder.calls = []
        exec(compile(snippet.text, snippet.slug, "exec"), {})  # the snippet, as a user runs it
        (_, client), (_, create) = _Recorder.calls
        assert client == {"base_url": f"{URL}/v1", "api_key": "sw-secret"}
        assert create["model"] == model and create["messages"] == [{"role": "user", "content": PROMPT}]
        assert create.get("stream", False) is stream
        assert capsys.readouterr().out.strip() == "Hello"


@pytest.mark.django_db
def test_the_page_shows_the_url_and_the_snippets_escaped_with_the_served_model(client, member, team, ep_quota,
                                                                              published, settings):
    settings.SLIPWAY_GATEWAY_URL = "https://api.example.com/"
    endpoint = services.create_endpoint(member, team, endpoint_payload(name="chat", env={"SLIPWAY_SIM_MODEL": NASTY}))
    assert endpoint.url == f"https://api.example.com/{team.slug}/chat" and endpoint.served_model == NASTY
    client.force_login(member)
    page = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    assert f'<code id="endpoint-url">{endpoint.url}</code>' in page
    assert 'data-copy="endpoint-url"' in page and endpoint.internal_url in page
    assert "<b>" not in page and "&lt;b&gt;" in page  # the name never becomes markup
    for snippet in snippets(endpoint.url, NASTY):
        shown = re.search(rf'<code id="snippet-{snippet.slug}"[^>]*>(.*?)</code>', page, re.S).group(1)
        assert html.unescape(shown) == snippet.text  # what the copy button copies is the snippet, exactly
        assert f'data-copy="snippet-{snippet.slug}"' in page


@pytest.mark.django_db
def test_the_served_model_follows_the_engine_plans_rule(member, team, ep_quota, published):
    endpoint = services.create_endpoint(member, team, endpoint_payload(name="chat"))
    assert endpoint.served_model == "chat"
    InferenceEndpoint.objects.filter(pk=endpoint.pk).update(args=["--model", "/models/llama",
                                                                  "--served-model-name=llama-3"])
    endpoint.refresh_from_db()
    assert endpoint.served_model == "llama-3"
