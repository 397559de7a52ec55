"""The runs pages in a real browser: the live preview, submitting, and polling that stops.

Unit tests check the markup and the 286 answers; this checks that htmx really does what the
markup asks (debounced preview on typing, the status panel swapping itself, polling ending
once the run is final). Playwright drives Debian's chromium (offline), like tests/browser/.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from jobs.constants import RunState
from jobs.models import TrainingRun
from quotas.demo import seed_flavors, seed_team_quotas
from teams.models import Role
from tests.browser.support import BROWSER_MARKS
from tests.factories import add_member, make_team, make_user

PASSWORD = "pw-Slipway-123"

pytestmark = BROWSER_MARKS


@pytest.fixture
def world(transactional_db, monkeypatch):
    """A team with A100 quota and a member; task publishes recorded (no broker in this test)."""
    team = make_team("ml-research", "ML Research")
    user = make_user("mia", password=PASSWORD)
    add_member(team, user, Role.MEMBER)
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 8})
    published: list[tuple] = []
    monkeypatch.setattr("core.queueing.publish", lambda task, *args, **kwargs: published.append((task.name, args)))
    return team, user, published


@pytest.fixture
def page(world, browser, live_server):
    """The browser, signed in as mia (the test touches the ORM while it runs, to finish a run behind its back)."""
    browser.goto(f"{live_server.url}/login/")
    browser.fill("#id_username", "mia")
    browser.fill("#id_password", PASSWORD)
    browser.click("button[type=submit]")
    browser.wait_for_url(f"{live_server.url}/")
    return browser


def test_it_previews_submits_and_stops_polling_once_final(live_server, page, world):
    _team, _user, published = world

    # 1. The live preview follows what is typed (debounced keyup) and picked (change).
    page.goto(f"{live_server.url}/runs/new/")
    page.select_option("#id_flavor", "a100-80gb")
    page.wait_for_function("() => document.querySelector('#preview').innerText.includes('Starts now')")
    page.fill("#id_gpus_per_worker", "")
    page.type("#id_gpus_per_worker", "4")
    page.wait_for_function("() => document.querySelector('#preview').innerText.includes('16.40 USD')")

    # 2. Submitting lands on the run's page.
    page.fill("#id_name", "bert-finetune")
    page.fill("#id_image", "registry.example.com/ml/trainer:1.4")
    page.fill("#id_command", "python train.py")
    page.click("button[type=submit].primary")
    page.wait_for_url(f"{live_server.url}/runs/*/")
    run = TrainingRun.objects.get()
    assert run.gpus_per_worker == 4 and run.command == ["python", "train.py"]
    assert published == [("workloads.tasks.apply_workload", ("run", run.pk))]
    assert page.inner_text("#run-status .badge") == "Admitted"

    # 3. The status panel polls; once the run is final it shows that and stops polling: the panel
    # htmx swapped in carries no poll trigger, and htmx polls only from elements that do (no wait
    # of a polling period needed to see it).
    polls: list[str] = []
    page.on("request", lambda request: polls.append(request.url) if request.url.endswith(f"/runs/{run.pk}/") else None)
    assert page.locator("#run-status").get_attribute("hx-trigger") == "every 3s"
    TrainingRun.objects.filter(pk=run.pk).update(state=RunState.SUCCEEDED, finished_at=timezone.now())
    page.wait_for_function("() => document.querySelector('#run-status .badge').innerText === 'Succeeded'",
                           timeout=10_000)
    assert polls, "the status panel never polled"
    assert page.locator("#run-status button.danger").count() == 0  # no Cancel on a final run
    assert page.locator("#run-status").get_attribute("hx-trigger") is None, "the status panel still polls a final run"


def test_it_echoes_the_typed_command_as_argv_and_runs_it_again_from_the_prefilled_form(live_server, page, world):
    # 1. A command with quotes: the echo under the field shows the arguments it splits into.
    page.goto(f"{live_server.url}/runs/new/")
    page.fill("#id_name", "quoted")
    page.fill("#id_image", "registry.example.com/ml/trainer:1.4")
    page.select_option("#id_flavor", "a100-80gb")
    page.type("#id_command", "python -c 'print(\"hi there\")' --tag \"a b\"")
    page.wait_for_function("() => document.querySelectorAll('#argv-echo .token').length === 5")
    tokens = page.locator("#argv-echo .token").all_inner_texts()
    assert tokens == ['"python"', '"-c"', '"print(\\"hi there\\")"', '"--tag"', '"a b"']

    # 2. An unclosed quote is said at once, before any submit.
    page.type("#id_args", "'open")
    page.wait_for_function("() => document.querySelector('#argv-echo').innerText.includes('A quote is not closed')")
    page.fill("#id_args", "")
    page.type("#id_args", "--epochs 2")
    page.wait_for_function("() => document.querySelectorAll('#argv-echo .token').length === 7")

    # 3. Submitted, the run page shows the same argv.
    page.click("button[type=submit].primary")
    page.wait_for_url(f"{live_server.url}/runs/*/")
    run = TrainingRun.objects.get()
    assert run.command == ["python", "-c", 'print("hi there")', "--tag", "a b"] and run.args == ["--epochs", "2"]
    assert '["python", "-c", "print(\\"hi there\\")", "--tag", "a b"]' in page.inner_text(".kv, body")

    # 4. "Run again…" opens the form prefilled (nothing submitted); edit, then submit.
    page.click("text=Run again…")
    page.wait_for_url(f"{live_server.url}/runs/new/?from={run.pk}")
    assert TrainingRun.objects.count() == 1
    assert page.input_value("#id_name") == "quoted-2"  # the original is still active
    assert page.locator("#argv-echo .token").count() == 7
    page.fill("#id_args", "--epochs 3")
    page.click("button[type=submit].primary")
    page.wait_for_url(lambda url: url.rstrip("/").split("/")[-1].isdigit() and str(run.pk) not in url.split("/")[-2:])
    again = TrainingRun.objects.exclude(pk=run.pk).get()
    assert again.command == run.command and again.args == ["--epochs", "3"] and again.name == "quoted-2"
