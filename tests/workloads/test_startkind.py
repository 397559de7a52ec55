"""``manage.py startkind`` (issue 48, point 7): its output passes the suite as generated, and it refuses what it cannot make.

The proof runs on a copy of the repository (git's tracked and untracked files, ignored ones such as .venv and var/
left out; the virtualenv and the vendored static files linked), so the checkout under test is never written: the
command scaffolds a kind there, then, in processes of their own as CI runs them, the linter, ``makemigrations
--check`` and the structural tests a new kind must meet — the registry's checks, the kind boundaries, the layers
and import cycles, the isolation matrix on the new kind's routes (its pages and its API), its part of the API fuzz,
the docs (the glossary's column), deploy/rbac.yaml — and the kind's generated tests: submit → admitted → running →
ended through the shared machinery on the fake cluster, its API, its pages and its verbs of the command line. The sandbox runs no controller for
the custom object the scaffold builds, so there is no cheap sandbox path; tests/<name>/ is where a kind's own
end-to-end test goes once it builds what the sandbox runs.

It took 110 s on the 2-vCPU VM while other work loaded it (load average 4-5; 144 s at 6-7): the command about 19 s (of which
two Django starts, for ``makemigrations`` and ``rbac``), ``makemigrations --check`` about 6 s, the tests 75-85 s
(14 s of it the test database's migrations — now a copy of the run's template and the new kind's migration,
tests/conftest.py ``django_db_setup`` —, 8 s the docs walk, 26 s the new kind's fuzz part, 10 s its verbs
against a live server). Marked ``slow``, it runs in the second serial lane (tests/conftest.py ``LANES``),
the shorter one since the suite's template database; the refusals below take milliseconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection

from tests.test_import_cycles import REPO
from workloads.registry import kinds

NAME = "renders"  # a kind the project does not have: its noun "render", its prefix "render"


def copy_of_the_repository(into: Path) -> Path:
    """The checkout as git sees it (tracked and untracked, not ignored) under ``into``, with .venv and the vendored
    static files (both ignored) linked from the checkout."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    copy = into / "repo"
    for relative in filter(None, listed):
        source = REPO / relative
        if source.is_file():  # a tracked file deleted in the working tree is listed too
            (copy / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / relative)
    for linked in (".venv", "static/vendor"):
        if (REPO / linked).exists():
            (copy / linked).symlink_to((REPO / linked).resolve())
    return copy


def environment(copy: Path) -> dict[str, str]:
    """This process's environment for the copy's processes: their own var directory, and a test database
    of their own — named after this worker's (which exists as long as this test runs), never the same one."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("PYTEST_", "PROMETHEUS_MULTIPROC")) and name != "DJANGO_SETTINGS_MODULE"}
    env["SLIPWAY_VAR_DIR"] = str(copy / "var" / "test")
    if connection.vendor == "postgresql":
        db = settings.DATABASES["default"]
        password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
        env["DATABASE_URL"] = f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"
    return env


def run(copy: Path, env: dict[str, str], *command: str) -> str:
    done = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, check=False)
    # What failed first (pytest's assertion lines and summary), then the end of the output.
    failed = [line for line in done.stdout.splitlines() if line.startswith(("E ", "FAILED", "ERROR"))]
    assert done.returncode == 0, (f"{' '.join(command)} failed ({done.returncode}):\n" + "\n".join(failed[:80])
                                  + f"\n…\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(1200)  # 420 s on a slow boot (2026-11-29)
@pytest.mark.django_db  # its database names the copy's: see environment()
def test_the_scaffolded_kind_passes_the_suite_as_generated(tmp_path):
    copy = copy_of_the_repository(tmp_path)
    env = environment(copy)
    python = sys.executable
    out = run(copy, {**env, "DJANGO_SETTINGS_MODULE": "portal.settings"}, python, "manage.py", "startkind", NAME)
    assert "Started the kind 'renders'" in out
    assert (copy / NAME / "migrations" / "0001_initial.py").is_file()
    assert f'"{NAME}",' in (copy / "portal" / "settings.py").read_text()

    run(copy, env, str(Path(python).with_name("ruff")), "check", ".")
    run(copy, {**env, "DJANGO_SETTINGS_MODULE": "portal.settings"}, python, "manage.py", "makemigrations", "--check",
        "--dry-run")
    out = run(copy, env, python, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
              f"tests/{NAME}", f"tests/cli/test_{NAME}.py", "tests/cli/test_groups.py", "tests/workloads/test_registry.py", "tests/test_kind_boundaries.py",
              "tests/test_layers.py", "tests/test_import_cycles.py", "tests/docs",
              "tests/deploy/test_manifests.py::test_deploy_rbac_is_what_the_kinds_declare_rendered",
              # The matrix on the new kind's routes (the ids name them: "renders:render-state", "render-detail") and its
              # completeness; the API fuzz on the new kind's part ("renders").
              "tests/test_isolation_matrix.py", "tests/api/test_fuzz.py",
              "-k", "not test_isolation_matrix and not test_fuzz or render or every_route")
    # The new kind's own tests and its routes in the matrix ran (a -k that selected none would pass as well).
    assert f"PASSED tests/{NAME}/test_{NAME}.py::test_it_is_admitted_applied_runs_and_ends" in out
    assert "PASSED tests/test_isolation_matrix.py::test_an_outsider_gets_404_and_nothing_changes[renders:render-state]" in out
    assert f"PASSED tests/cli/test_{NAME}.py::test_it_previews_creates_lists_describes_and_deletes_one" in out
    assert "PASSED tests/test_isolation_matrix.py::test_a_viewer_cannot_mutate[render-detail]" in out  # its DELETE
    assert "PASSED tests/api/test_fuzz.py::test_every_operation_answers_as_its_schema_says[renders]" in out
    assert "PASSED tests/docs/test_glossary_states.py::test_every_kind_has_a_column_listing_its_queued_and_holding_states" in out


@pytest.fixture
def command_repo(settings, tmp_path):
    """The command pointed at an empty directory: a refusal must come before anything is written."""
    settings.BASE_DIR = tmp_path
    return tmp_path


@pytest.mark.parametrize(("arguments", "refusal"), [
    (["Sweeps"], "'Sweeps' is not a lowercase Python identifier"),
    (["class"], "'class' is not a lowercase Python identifier"),
    (["quotas"], "'quotas' is the name of a module that exists already"),
    ([NAME, "--prefix", "render-1"], "the prefix 'render-1' is not lowercase letters only"),
    ([NAME, "--noun", "Sweep"], "the noun 'Sweep' is not a lowercase identifier"),
])
def test_it_refuses_a_bad_name_with_a_command_error(command_repo, arguments, refusal):
    with pytest.raises(CommandError, match=refusal):
        call_command("startkind", *arguments)
    assert list(command_repo.iterdir()) == []


def test_it_refuses_a_prefix_noun_or_model_another_kind_has(command_repo):
    other = kinds()[0]
    with pytest.raises(CommandError) as refused:
        call_command("startkind", NAME, "--prefix", other.prefix, "--noun", other.noun)
    assert f"the prefix {other.prefix!r} is {type(other).__name__}'s" in str(refused.value)
    assert f"the noun {other.noun!r} is {type(other).__name__}'s" in str(refused.value)
    assert list(command_repo.iterdir()) == []


def test_it_refuses_a_directory_that_exists(command_repo):
    (command_repo / "tests" / NAME).mkdir(parents=True)
    with pytest.raises(CommandError, match=f"{command_repo / 'tests' / NAME} exists already"):
        call_command("startkind", NAME)
    assert [path.name for path in command_repo.iterdir()] == ["tests"]
