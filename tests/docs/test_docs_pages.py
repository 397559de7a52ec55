"""The pages themselves: the walk's scan and lists stay true, tables are whole, and every
``SLIPWAY_*`` name a page gives is a setting ``.env.example`` lists or says what else it is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs import scan
from tests.docs.test_docs_walk import NAMED_VERBS, NOT_COMMANDS, REWRITES, SKIPPED

REPO = scan.REPO

#: ``SLIPWAY_*`` names the pages give that are not settings of the portal, by what reads them.
NOT_SETTINGS = {
    "the slipway command (slipway/)": {"SLIPWAY_URL", "SLIPWAY_TOKEN", "SLIPWAY_PROFILE"},
    "the caller's shell, holding an endpoint's API key (the page's snippets, inference/snippets.py)": {"SLIPWAY_KEY"},
    "a run's pods (the checkpoint contract, jobs/checkpoint_contract.py)": {
        "SLIPWAY_CHECKPOINT_DIR", "SLIPWAY_RESUME_FROM", "SLIPWAY_ATTEMPT", "SLIPWAY_RUN_TOKEN",
        "SLIPWAY_CHECKPOINT_URL"},
    "the line a run prints to report a checkpoint (workloads/)": {"SLIPWAY_CHECKPOINT"},
    "the line a run prints to report its progress (jobs/metric_lines.py)": {"SLIPWAY_PROGRESS"},
    "bench/api.py (the port its gunicorn listens on)": {"SLIPWAY_BENCH_PORT"},
    "a workload's env, read by the sandbox's simulation (sandbox/simulation.py)": {
        "SLIPWAY_SIM_DURATION", "SLIPWAY_SIM_OUTCOME", "SLIPWAY_SIM_FAILED_ATTEMPTS", "SLIPWAY_SIM_GPU_UTIL",
        "SLIPWAY_SIM_LOAD_SECONDS", "SLIPWAY_SIM_CHECKPOINT_EVERY", "SLIPWAY_SIM_HONOUR_NOTICE",
        "SLIPWAY_SIM_GPU_MEMORY_GB", "SLIPWAY_SIM_LOG_EVERY", "SLIPWAY_SIM_IDLE_AFTER", "SLIPWAY_SIM_GPU_MEMORY_LEAK",
        "SLIPWAY_SIM_SCHEDULE_SECONDS", "SLIPWAY_SIM_PULL_SECONDS", "SLIPWAY_SIM_START_SECONDS",
        "SLIPWAY_SIM_OPTIMUM", "SLIPWAY_SIM_CURVE_SEED"},
    "an endpoint's env, read by the sandbox's engine (sandbox/engine.py)": {
        "SLIPWAY_SIM_TTFT_MS", "SLIPWAY_SIM_TOKEN_MS", "SLIPWAY_SIM_MAX_CONCURRENCY", "SLIPWAY_SIM_ERROR_RATE",
        "SLIPWAY_SIM_MAX_TOKENS", "SLIPWAY_SIM_MAX_MODEL_LEN", "SLIPWAY_SIM_MODEL"},
}


def pages() -> list[Path]:
    return [*scan.documents(), REPO / "deploy" / "README.md", REPO / "BENCHMARKS.md"]


def page_id(path: Path) -> str:
    return scan.relative(path)


# -- the walk's scan and lists --------------------------------------------------------------------


def test_the_scan_finds_paths_but_not_files_or_other_hosts(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Open <http://127.0.0.1:8000/> or `GET /api/v1/runs/{id}/`; `PATCH /clusters/{name}/` too.\n"
                    "Not `deploy/grafana/x.json`, `$API/runs/`, `https://slipway.example.com/api/v1/`, `14 / 8`,\n"
                    "but `curl http://localhost:8000/metrics`.\n"
                    "```sh\ncurl /in/a/shell/block\n```\n")
    found = [(m.line, m.method, m.text) for m in scan.urls(page)]
    assert sorted(found) == [(1, "GET", "/"), (1, "GET", "/api/v1/runs/{id}/"), (1, "PATCH", "/clusters/{name}/"),
                             (3, "GET", "/metrics")]


def test_a_console_block_is_a_session_of_commands_and_what_they_printed(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```console\n$ cat a.yaml\nname: x\n$ slipway run -f a.yaml \\\n    --dry-run   # nothing is made\n"
                    "Decision: admit\n$ slipway ps\n```\n")
    (block,) = scan.blocks(page)
    assert scan.commands_in_block(block) == [
        (2, "cat a.yaml", "name: x\n"), (4, "slipway run -f a.yaml --dry-run", "Decision: admit\n"),
        (7, "slipway ps", "")]


def all_mentions() -> list[str]:
    """Everything the walk looks at, as written (URLs also with their method)."""
    found: list[str] = []
    for page in scan.documents():
        found += [text for m in scan.urls(page) for text in (m.text, f"{m.method} {m.text}")]
        found += [m.text for m in scan.commands_in_spans(page, ("slipway ", "python ", "manage.py ", ".venv/bin/",
                                                                  "make ", "kubectl ", "curl "))]
        found += [command for block in scan.blocks(page) if block.language in scan.SHELL
                  for _line, command, _shown in scan.commands_in_block(block)]
    return found


def test_every_skip_and_rewrite_still_names_something_on_the_pages():
    """A list entry whose command left the pages would hide the next one that matches it."""
    mentions = all_mentions()
    stale = [pattern for pattern in SKIPPED if not any(re.fullmatch(pattern, text) for text in mentions)]
    stale += [text for text in (*NOT_COMMANDS, *REWRITES, *NAMED_VERBS) if text not in mentions]
    assert stale == []


# -- tables ---------------------------------------------------------------------------------------


def tables(text: str) -> list[list[str]]:
    """Runs of consecutive ``|`` lines outside code blocks."""
    text = scan.FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    found: list[list[str]] = []
    previous = False
    for line in text.splitlines():
        row = line.strip().startswith("|")
        if row and not previous:
            found.append([])
        if row:
            found[-1].append(line.strip())
        previous = row
    return found


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_table_is_whole_and_lists_no_row_twice(page):
    """A blank line inside a table starts a headless fragment that renders as text (README's
    "Where to go next" had one, with a row repeated)."""
    for table in tables(page.read_text()):
        assert len(table) >= 2 and re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", table[1].replace(" ", "")), table[0]
        rows = [re.sub(r"\s+", " ", row) for row in table[2:]]
        assert len(rows) == len(set(rows)), [row for row in rows if rows.count(row) > 1]


# -- settings the pages name ------------------------------------------------------------------------


def env_example_names() -> set[str]:
    return set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", (REPO / ".env.example").read_text(), flags=re.MULTILINE))


def test_every_slipway_variable_a_page_names_is_a_setting_env_example_lists_or_said_otherwise():
    named = {name for page in pages() for name in re.findall(r"\bSLIPWAY_[A-Z0-9_]*[A-Z0-9]\b", page.read_text())}
    others = set().union(*NOT_SETTINGS.values())
    assert named - env_example_names() - others == set()


def test_the_names_that_are_not_settings_are_read_where_the_list_says():
    source = "\n".join(path.read_text() for folder in ("slipway", "cluster", "sandbox", "workloads", "jobs", "bench",
                                                                     "inference")
                       for path in (REPO / folder).rglob("*.py"))
    assert [name for names in NOT_SETTINGS.values() for name in names if name not in source] == []
