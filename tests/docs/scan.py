"""What the README and docs/ show a user to type or open: URLs on the local server and commands.

Pure text work, no Django: the walk (``test_docs_walk.py``) decides what runs and how.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: A fenced code block: its language and its body.
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
#: An inline code span.
SPAN = re.compile(r"`([^`\n]+)`")
#: A path on the server, optionally after an HTTP method, or the demo's own address with its path.
#: A bare path starts a token (not ``deploy/grafana/…``, ``$API/runs/`` nor ``https://host/…``)
#: and has something after its slash (``14 / 8`` is no path).
URL = re.compile(r"(?:\b(?P<method>GET|POST|PUT|PATCH|DELETE)\s+)?"
                 r"(?:https?://(?:127\.0\.0\.1|localhost)(?::\d+)?(?P<hostpath>/[\w\-./{}<>?=&%]*)?"
                 r"|(?<![\w.$/~:-])(?P<path>/[\w{<.][\w\-./{}<>?=&%]*))")
#: The demo's address in prose (``<http://127.0.0.1:8000/>``, a Markdown link).
LOCAL = re.compile(r"https?://(?:127\.0\.0\.1|localhost)(?::\d+)?(?P<path>/[\w\-./?=&%]*)?")
#: A shell comment after a command (``slipway ps   # a minute later``).
COMMENT = re.compile(r"\s+#\s.*$")
#: Languages of blocks whose lines are commands (a ``console`` block's commands follow ``$ ``).
SHELL = ("sh", "bash", "shell", "console")


@dataclass(frozen=True)
class Mention:
    """One URL or command as a document shows it."""

    document: str  # relative to the repository
    line: int
    text: str
    method: str = "GET"  # URLs: the method written before it


@dataclass(frozen=True)
class Block:
    """A fenced shell block: the commands it shows and, for a console session, what each printed."""

    document: str
    line: int
    language: str
    body: str


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def relative(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def spans(path: Path) -> list[tuple[int, str]]:
    """Every inline code span outside the fenced blocks, with its line."""
    text = path.read_text()
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return [(_line_of(prose, m.start()), m.group(1)) for m in SPAN.finditer(prose)]


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    return [Block(relative(path), _line_of(text, m.start()) + 1, m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def urls(path: Path) -> list[Mention]:
    """Paths in code (spans and every block's lines) and the local server's address in prose."""
    found: list[Mention] = []
    # Shell blocks are commands: the walk runs them (or says why not) instead of opening their URLs.
    pieces = spans(path) + [(block.line + n, line) for block in blocks(path) if block.language not in SHELL
                            for n, line in enumerate(block.body.splitlines())]
    for line, piece in pieces:
        for m in URL.finditer(piece):
            found.append(Mention(relative(path), line, m.group("path") or m.group("hostpath") or "/",
                                 m.group("method") or "GET"))
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), path.read_text())
    text = SPAN.sub(lambda m: " " * len(m.group(0)), text)
    for m in LOCAL.finditer(text):
        found.append(Mention(relative(path), _line_of(text, m.start()), (m.group("path") or "/").rstrip(".,")))
    return found


def commands_in_spans(path: Path, starts: tuple[str, ...]) -> list[Mention]:
    """Inline code spans that are a command (they begin with one of ``starts``)."""
    return [Mention(relative(path), line, span) for line, span in spans(path)
            if span.startswith(starts)]


def commands_in_block(block: Block) -> list[tuple[int, str, str]]:
    """``(line, command, what the page shows it printed)`` for a shell block, continuation lines joined.

    A ``console`` block is a session: commands follow ``$ ``, the lines after one are its output.
    Any other shell block is all commands (comments and blank lines aside).
    """
    found: list[tuple[int, str, str]] = []
    pending, first = "", 0
    for number, raw in enumerate(block.body.splitlines(), start=block.line):
        if block.language == "console" and not pending:
            if not raw.startswith("$ "):
                if found:
                    line, command, output = found[-1]
                    found[-1] = (line, command, f"{output}{raw}\n")
                continue
            raw = raw[2:]
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        first = first or number
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        found.append((first, COMMENT.sub("", pending + stripped), ""))
        pending, first = "", 0
    return found


def words(command: str) -> list[str]:
    """The command split as a shell splits it, a trailing ``# comment`` dropped."""
    return shlex.split(command, comments=True)
