"""Ready-to-paste calls of an endpoint, as its page shows them: ``curl`` and the OpenAI Python client,
each plain and streaming (docs/serving.md, "The endpoint's URL").

A pure function of the endpoint's external URL and served model name. Both come from rows a user wrote
(the model name from the endpoint's env or args), so every value is quoted for the language it lands in:
:func:`shlex.quote` for the shell (a name holding ``'``, ``$(…)`` or a backtick stays one word, never
run), :func:`json.dumps` for the request body, :func:`repr` for Python string literals (a valid literal
for any string, astral characters included, which JSON's ``\\u`` pairs would break). The page escapes
the result for HTML like any text. The key is never in a snippet: it is read from ``$SLIPWAY_KEY``.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

#: The environment variable the snippets read the key from.
KEY_ENV = "SLIPWAY_KEY"
#: What the snippets ask.
PROMPT = "Say hello in five words."


@dataclass(frozen=True)
class Snippet:
    slug: str  #: the element id's suffix on the page
    title: str
    language: str  #: "shell" | "python"
    text: str


def _curl(url: str, model: str, stream: bool) -> str:
    body: dict = {"model": model, "messages": [{"role": "user", "content": PROMPT}]}
    if stream:
        body["stream"] = True
    lines = [f"curl {'-N ' if stream else ''}{shlex.quote(url.rstrip('/') + '/v1/chat/completions')}",
             f'-H "Authorization: Bearer ${KEY_ENV}"',  # double quotes: the shell fills the key in
             "-H 'Content-Type: application/json'",
             f"-d {shlex.quote(json.dumps(body))}"]
    return " \\\n  ".join(lines) + "\n"


def _python(url: str, model: str, stream: bool) -> str:
    head = ("import os\n\nfrom openai import OpenAI\n\n"
            f"client = OpenAI(base_url={url.rstrip('/') + '/v1'!r}, api_key=os.environ[{KEY_ENV!r}])\n")
    call = (f"client.chat.completions.create(\n    model={model!r},\n"
            f"    messages=[{{\"role\": \"user\", \"content\": {PROMPT!r}}}],\n")
    if not stream:
        return f"{head}reply = {call})\nprint(reply.choices[0].message.content)\n"
    return (f"{head}stream = {call}    stream=True,\n)\n"
            "for chunk in stream:\n"
            "    if chunk.choices and chunk.choices[0].delta.content:\n"
            "        print(chunk.choices[0].delta.content, end=\"\", flush=True)\n"
            "print()\n")


def snippets(url: str, model: str) -> list[Snippet]:
    """The four snippets for the endpoint at ``url`` serving ``model``."""
    return [
        Snippet("curl", "curl", "shell", _curl(url, model, stream=False)),
        Snippet("curl-stream", "curl, streaming", "shell", _curl(url, model, stream=True)),
        Snippet("python", "OpenAI Python client", "python", _python(url, model, stream=False)),
        Snippet("python-stream", "OpenAI Python client, streaming", "python", _python(url, model, stream=True)),
    ]
