"""Portal pages of training runs and the dashboard: list, state cell, new run + preview, detail,
logs, cancel, run again (the form prefilled).

Every view: happy path, wrong method, outsider (404), viewer (403 on writes), htmx partial vs
full page; list views pinned with ``django_assert_num_queries`` at two sizes.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import QuotaHold
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.page import timeline
from quotas.demo import seed_team_quotas
from quotas.models import QueuedRequest
from teams.models import Role
from tests.factories import add_member, make_user
from tests.fakes import pod
from tests.jobs.conftest import submit_run_as
from workloads.registry import kinds

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def fast_password_hasher(settings):
    # PBKDF2's deliberate slowness costs ~0.4 s per user created; no test here measures it.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def set_state(run, state, **fields):
    TrainingRun.objects.filter(pk=run.pk).update(state=state, **fields)
    run.refresh_from_db()
    return run


def form_data(**overrides) -> dict:
    data = {
        "name": "bert-finetune", "image": "registry.example.com/ml/trainer:1.4", "command": "python train.py",
        "args": "--epochs 3 --note 'hello world'", "env": "WANDB_MODE=offline\nSEED=7", "flavor": "a100-80gb",
        "gpus_per_worker": "2", "workers": "1", "priority": "normal", "max_retries": "2",
        "volumes": "datasets:/data:ro\nscratch:/scratch",
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


# -- runs list -----------------------------------------------------------------------------------


def test_it_lists_the_current_teams_runs_with_state_cells(client, member, team, quota, published):
    mine = submit_run_as(member, team, name="mine")
    client.force_login(member)
    response = client.get("/runs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" in html and f'href="/runs/{mine.pk}/"' in html
    assert f'hx-get="/runs/{mine.pk}/state/"' in html and 'hx-trigger="every 3s"' in html
    assert 'href="/runs/new/"' in html  # members may submit


def test_it_shows_only_the_current_teams_runs(client, member, outsider, other_team, team, quota, published, flavors):
    from quotas.demo import seed_team_quotas

    seed_team_quotas(other_team, {"a100-80gb": 2})
    submit_run_as(member, team, name="ours")
    submit_run_as(outsider, other_team, name="secret-vision-run", gpus_per_worker=1)
    client.force_login(member)
    html = client.get("/runs/").content.decode()
    assert "ours" in html and "secret-vision-run" not in html


def test_it_filters_runs_by_state_name_and_creator(client, member, team_admin, team, quota, published):
    submit_run_as(member, team, name="alpha")
    done = submit_run_as(member, team, name="beta")
    set_state(done, RunState.SUCCEEDED, finished_at=timezone.now())
    waiting = submit_run_as(team_admin, team, name="gamma")
    set_state(waiting, RunState.QUEUED)
    client.force_login(member)

    def names(query: str) -> set[str]:
        html = client.get("/runs/" + query).content.decode()
        return {n for n in ("alpha", "beta", "gamma") if f">{n}</a>" in html}

    assert names("") == {"alpha", "beta", "gamma"}
    assert names("?state=succeeded") == {"beta"}
    assert names("?state=active") == {"alpha", "gamma"}  # queued or holding quota (docs/glossary.md)
    assert names("?state=holding") == {"alpha"}
    assert names("?mine=1") == {"alpha", "beta"}
    assert names("?q=amm") == {"gamma"}
    assert "No runs match these filters." in client.get("/runs/?q=nothing").content.decode()


def test_it_renders_only_the_rows_for_htmx(client, member, team, quota, published):
    run = submit_run_as(member, team)
    client.force_login(member)
    response = client.get("/runs/?state=active", **HTMX)
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in html and 'class="filters"' not in html
    assert f'href="/runs/{run.pk}/"' in html


def test_it_serves_the_full_list_when_htmx_restores_history(client, member, team, quota):
    client.force_login(member)
    response = client.get("/runs/", HTTP_HX_HISTORY_RESTORE_REQUEST="true", **HTMX)
    assert "<html" in response.content.decode()
    assert "HX-Request" in response["Vary"]


def test_it_shows_the_queue_position_of_queued_runs(client, member, team, quota, published):
    submit_run_as(member, team, name="big", gpus_per_worker=8)
    submit_run_as(member, team, name="waits", gpus_per_worker=2)
    client.force_login(member)
    assert "#1 in queue" in client.get("/runs/").content.decode()


def test_it_hides_the_new_run_button_from_viewers(client, viewer, member, team, quota, published):
    submit_run_as(member, team)
    client.force_login(viewer)
    html = client.get("/runs/").content.decode()
    assert "bert-finetune" in html and 'href="/runs/new/"' not in html


def test_it_refuses_posts_to_the_list(client, member):
    client.force_login(member)
    assert client.post("/runs/").status_code == 405


def test_it_asks_anonymous_users_to_log_in(client):
    response = client.get("/runs/")
    assert response.status_code == 302 and response.url.startswith("/login/")


@pytest.mark.parametrize("url", ["/runs/", "/runs/new/", "/"])
def test_it_shows_a_friendly_page_to_users_without_a_team(client, url):
    client.force_login(make_user("loner"))
    response = client.get(url)
    assert response.status_code == 200
    assert "not in any team yet" in response.content.decode()


@pytest.mark.parametrize("htmx", [False, True])
def test_it_lists_in_a_constant_number_of_queries(client, member, team, quota, published, django_assert_num_queries,
                                                  htmx):
    client.force_login(member)
    headers = HTMX if htmx else {}

    def make(count: int, start: int) -> None:
        for i in range(start, start + count):
            run = submit_run_as(member, team, name=f"run-{i}", gpus_per_worker=4)  # the third one queues
            if i % 3 == 0:
                set_state(run, RunState.RUNNING, started_at=timezone.now())

    make(3, 0)
    client.get("/runs/", **headers)  # warm the session
    # session, user, current membership, access check, switcher memberships, count, page, the page's
    # quota holds (their money), queue positions, the rows' one price book (2: clusters, cluster prices)
    expected = 10 if htmx else 11
    with django_assert_num_queries(expected):
        assert client.get("/runs/", **headers).status_code == 200
    make(12, 3)
    with django_assert_num_queries(expected):
        assert client.get("/runs/", **headers).status_code == 200


# -- state cell ------------------------------------------------------------------------------------


def test_it_keeps_polling_the_state_cell_of_an_active_run(client, member, team, quota, published):
    run = submit_run_as(member, team)
    client.force_login(member)
    response = client.get(f"/runs/{run.pk}/state/", **HTMX)
    html = response.content.decode()
    assert response.status_code == 200
    assert 'class="badge admitted"' in html and 'hx-trigger="every 3s"' in html and "<html" not in html


def test_it_stops_polling_with_286_once_the_run_is_final(client, member, team, quota, published):
    run = set_state(submit_run_as(member, team), RunState.SUCCEEDED, finished_at=timezone.now())
    client.force_login(member)
    response = client.get(f"/runs/{run.pk}/state/", **HTMX)
    assert response.status_code == 286
    html = response.content.decode()
    assert 'class="badge succeeded"' in html and "hx-trigger" not in html


def test_it_shows_the_queue_position_in_the_state_cell(client, member, team, quota, published):
    submit_run_as(member, team, name="big", gpus_per_worker=8)
    queued = submit_run_as(member, team, name="waits")
    client.force_login(member)
    assert "#1 in queue" in client.get(f"/runs/{queued.pk}/state/", **HTMX).content.decode()


def test_it_hides_state_cells_of_other_teams(client, member, outsider, team, quota, published):
    run = submit_run_as(member, team)
    client.force_login(outsider)
    assert client.get(f"/runs/{run.pk}/state/").status_code == 404


def test_it_refuses_posts_to_the_state_cell(client, member, team, quota, published):
    run = submit_run_as(member, team)
    client.force_login(member)
    assert client.post(f"/runs/{run.pk}/state/").status_code == 405


# -- new run ---------------------------------------------------------------------------------------


def test_it_shows_the_flavor_picker_with_prices_and_free_units(client, member, team, quota, published):
    submit_run_as(member, team, name="uses-two", gpus_per_worker=2)
    client.force_login(member)
    response = client.get("/runs/new/")
    assert response.status_code == 200
    html = response.content.decode()
    # The one price of a unit-hour now (billing.pricing); spot is priced by the preview, as shaped.
    # Then how a unit shares its GPU (quotas.policy.traits, as the "Which flavor?" page says it).
    assert ('<option value="a100-80gb">a100-80gb — 4.10 USD/h · Whole GPU · exclusive · 80 GB own · 6 of 8 free'
            '</option>') in html
    assert "l4 — 0.80 USD/h · Whole GPU · exclusive · 24 GB own · 2 of 2 free" in html
    assert '<option value="h100-80gb" disabled>h100-80gb' in html and "no quota for your team" in html
    assert 'hx-post="/runs/preview/"' in html and 'hx-trigger="change, keyup delay:400ms"' in html


def test_it_prefills_the_flavor_from_the_query_string(client, member, team, quota):
    client.force_login(member)
    html = client.get("/runs/new/?flavor=l4").content.decode()
    assert '<option value="l4" selected>' in html


def test_it_submits_a_run_from_the_text_inputs(client, member, team, quota, published,
                                               django_capture_on_commit_callbacks):
    client.force_login(member)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/runs/new/", form_data())
    run = TrainingRun.objects.get()
    assert response.status_code == 302 and response.url == f"/runs/{run.pk}/"
    assert run.state == RunState.ADMITTED and run.created_by == member and run.team == team
    assert run.command == ["python", "train.py"]
    assert run.args == ["--epochs", "3", "--note", "hello world"]
    assert run.env == {"WANDB_MODE": "offline", "SEED": "7"}
    assert run.volumes == [{"claim": "datasets", "mount_path": "/data", "read_only": True},
                           {"claim": "scratch", "mount_path": "/scratch", "read_only": False}]
    assert run.gpus_per_worker == 2 and run.max_retries == 2 and run.cpu is None
    assert published == [("workloads.tasks.apply_workload", ("run", run.pk))]
    assert "was admitted" in client.get(response.url).content.decode()


def test_it_says_when_a_submitted_run_is_queued(client, member, team, quota, published):
    submit_run_as(member, team, name="big", gpus_per_worker=8)
    client.force_login(member)
    response = client.post("/runs/new/", form_data(name="waits"), follow=True)
    assert "is queued: waiting for quota: needs 2\u00d7 a100-80gb, 8 of 8 in use" in response.content.decode()


@pytest.mark.parametrize(("overrides", "field", "message"), [
    ({"env": "NOT A PAIR"}, "env", "Line 1: expected KEY=VALUE"),
    ({"env": "1BAD=x"}, "env", "Invalid variable name"),
    ({"volumes": "data"}, "volumes", "expected claim:/mount/path"),
    ({"volumes": "data:/etc"}, "volumes", "/etc is a reserved path"),
    ({"image": "Not An Image"}, "image", "Not a valid image reference"),
    ({"name": "Bad_Name"}, "name", "Use lowercase letters"),
    ({"command": ""}, "command", "This field is required"),
    ({"gpus_per_worker": "1.5"}, "gpus_per_worker", "Must be a whole number"),
    ({"shm_gb": "64", "memory_gb": "32"}, "shm_gb", "must not exceed memory_gb"),
    ({"flavor": "h100-80gb"}, "flavor", "no quota for h100-80gb"),
    ({"workers": "2", "gpus_per_worker": "8"}, "workers", "more than the team&#x27;s limit of 8"),
])
def test_it_shows_errors_next_to_the_field_and_writes_nothing(client, member, team, quota, published, overrides,
                                                              field, message):
    client.force_login(member)
    response = client.post("/runs/new/", form_data(**overrides))
    assert response.status_code == 400
    html = response.content.decode()
    errors = html.split(f'id="id_{field}_errors"', 1)
    assert len(errors) == 2, f"no errors shown next to {field}"
    assert message in errors[1].split("</ul>", 1)[0]
    assert not TrainingRun.objects.exists() and not QuotaHold.objects.exists() and published == []


def test_it_reports_every_bad_field_at_once(client, member, team, quota, published):
    client.force_login(member)
    html = client.post("/runs/new/", form_data(env="OOPS", volumes="data:/etc", image="Bad Image")).content.decode()
    for field in ("env", "volumes", "image"):
        assert f'id="id_{field}_errors"' in html
    assert not TrainingRun.objects.exists()


def test_it_shows_a_name_already_in_use_next_to_the_name(client, member, team, quota, published):
    submit_run_as(member, team)
    client.force_login(member)
    html = client.post("/runs/new/", form_data()).content.decode()
    assert "already has an active run named" in html.split('id="id_name_errors"', 1)[1]
    assert TrainingRun.objects.count() == 1


def image_input(html: str) -> str:
    return re.search(r'<input[^>]*name="image"[^>]*>', html).group(0)


def test_the_new_run_form_starts_with_the_installs_image_for_the_tour_to_keep(client, member, quota, settings):
    client.force_login(member)
    # README's tour: "keep the image the form starts with" — one the demo's registry holds.
    assert 'value="registry.example.com/ml/trainer:2.4"' in image_input(client.get("/runs/new/").content.decode())
    settings.SLIPWAY_DEFAULT_RUN_IMAGE = "ghcr.io/acme/base:7"
    assert 'value="ghcr.io/acme/base:7"' in image_input(client.get("/runs/new/").content.decode())
    settings.SLIPWAY_DEFAULT_RUN_IMAGE = ""
    assert "value=" not in image_input(client.get("/runs/new/").content.decode())


def test_it_forbids_viewers_the_new_run_form(client, viewer, team, quota, published):
    client.force_login(viewer)
    assert client.get("/runs/new/").status_code == 403
    assert client.post("/runs/new/", form_data()).status_code == 403
    assert not TrainingRun.objects.exists()


def test_it_refuses_other_methods_on_the_new_run_form(client, member, quota):
    client.force_login(member)
    assert client.put("/runs/new/").status_code == 405


# -- live preview ------------------------------------------------------------------------------------


def test_it_previews_cost_and_that_the_run_starts_now(client, member, team, quota):
    client.force_login(member)
    response = client.post("/runs/preview/", {"flavor": "a100-80gb", "gpus_per_worker": "2", "workers": "1"}, **HTMX)
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert "8.20 USD" in html and "Starts now" in html and 'class="preview admit"' in html


def test_it_previews_the_spot_price(client, member, team, quota):
    client.force_login(member)
    html = client.post("/runs/preview/", {"flavor": "a100-80gb", "gpus_per_worker": "2", "spot": "on"}).content.decode()
    assert "3.28 USD" in html


def test_it_previews_a_queue_with_its_reason(client, member, team, quota, published):
    submit_run_as(member, team, name="big", gpus_per_worker=8)
    client.force_login(member)
    html = client.post("/runs/preview/", {"flavor": "a100-80gb", "gpus_per_worker": "2"}).content.decode()
    assert "<strong>Will queue:</strong> waiting for quota: needs 2\u00d7 a100-80gb, 8 of 8 in use" in html


def test_it_previews_a_rejection_with_its_reason(client, member, team, quota):
    client.force_login(member)
    html = client.post("/runs/preview/", {"flavor": "h100-80gb", "gpus_per_worker": "1"}).content.decode()
    assert "<strong>Rejected:</strong> the team has no quota for h100-80gb" in html


def test_it_previews_a_half_filled_form_without_complaining_about_empty_fields(client, member, team, quota):
    client.force_login(member)
    html = client.post("/runs/preview/", {"flavor": "", "name": ""}).content.decode()
    # No flavor yet: the preview asks for one, it does not say a field is required.
    assert "Pick a flavor to see the price" in html and "required" not in html and "name" not in html
    html = client.post("/runs/preview/", {"flavor": "a100-80gb", "gpus_per_worker": "0"}).content.decode()
    assert "gpus_per_worker: " in html  # with a flavor, what is wrong with the request is said


def test_it_forbids_viewers_the_preview_and_refuses_get(client, viewer, member, team, quota):
    client.force_login(viewer)
    assert client.post("/runs/preview/", {"flavor": "a100-80gb"}).status_code == 403
    client.force_login(member)
    assert client.get("/runs/preview/").status_code == 405


# -- detail ----------------------------------------------------------------------------------------


def test_it_shows_a_running_run_in_full(client, member, team, quota, published, fake_backend):
    run = submit_run_as(member, team, volumes=[{"claim": "datasets", "mount_path": "/data", "read_only": True}])
    now = timezone.now()
    set_state(run, RunState.RUNNING, applied_at=now, started_at=now, reason="")
    fake_backend.pod_lists[(run.namespace, run.object_name)] = [pod(run.object_name, "Running", 2)]
    client.force_login(member)
    response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert '<span class="badge running">Running</span>' in html
    assert html.count('class="done"') == 3 and 'class="current" aria-current="step"' in html
    assert 'class="todo"' in html  # succeeded is still ahead
    assert "kind: Job" in html and f"name: run-{run.pk}" in html  # the manifest as YAML
    assert "Scheduled" in html and f"Pod/run-{run.pk}-0" in html  # events
    assert "log line 2" in html and f'hx-get="/runs/{run.pk}/logs/"' in html
    assert "datasets:/data:ro" in html and "registry.example.com/ml/trainer:1.4" in html
    assert "8.20 USD per hour" in html
    assert f'action="/runs/{run.pk}/cancel/"' in html and f'href="/runs/new/?from={run.pk}"' in html


def test_it_shows_the_current_queue_reason_of_a_queued_run(client, member, team, quota, published):
    submit_run_as(member, team, name="big", gpus_per_worker=8)
    queued = submit_run_as(member, team, name="waits", gpus_per_worker=4)
    client.force_login(member)
    html = client.get(f"/runs/{queued.pk}/").content.decode()
    assert "waiting for quota: needs 4\u00d7 a100-80gb, 8 of 8 in use" in html
    assert "No cluster events yet" in html and "No log lines yet." in html


def test_it_shows_viewers_no_buttons(client, member, viewer, team, quota, published):
    run = submit_run_as(member, team)
    client.force_login(viewer)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert "bert-finetune" in html
    assert "/cancel/" not in html and "?from=" not in html


def test_it_shows_no_cancel_button_once_final(client, member, team, quota, published):
    run = set_state(submit_run_as(member, team), RunState.FAILED, finished_at=timezone.now(), reason="OOMKilled")
    client.force_login(member)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert "/cancel/" not in html and "?from=" in html and "OOMKilled" in html
    assert 'hx-trigger="every 3s"' not in html  # nothing polls a final run


def test_it_renders_the_status_panel_for_htmx_and_stops_when_final(client, member, team, quota, published):
    run = submit_run_as(member, team)
    client.force_login(member)
    response = client.get(f"/runs/{run.pk}/", **HTMX)
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html and 'id="run-status"' in html
    assert "kind: Job" not in html  # the manifest is not part of the panel
    set_state(run, RunState.SUCCEEDED, finished_at=timezone.now())
    response = client.get(f"/runs/{run.pk}/", **HTMX)
    assert response.status_code == 286 and "hx-trigger" not in response.content.decode()


def test_it_hides_runs_of_other_teams(client, member, outsider, team, quota, published):
    run = submit_run_as(member, team)
    client.force_login(outsider)
    for url in (f"/runs/{run.pk}/", f"/runs/{run.pk}/logs/"):
        assert client.get(url).status_code == 404
    assert client.post(f"/runs/{run.pk}/cancel/").status_code == 404
    assert client.get("/runs/999999/").status_code == 404
    run.refresh_from_db()
    assert run.state == RunState.ADMITTED and TrainingRun.objects.count() == 1


def test_it_refuses_posts_to_the_detail(client, member, team, quota, published):
    run = submit_run_as(member, team)
    client.force_login(member)
    assert client.post(f"/runs/{run.pk}/").status_code == 405


# -- timeline ----------------------------------------------------------------------------------------


def test_it_builds_the_timeline_of_a_run_cancelled_while_queued():
    created = timezone.now()
    run = TrainingRun(state=RunState.CANCELLED, created_at=created, finished_at=created + timedelta(minutes=5))
    steps = timeline(run)
    assert [(s.state, s.status) for s in steps] == [("queued", "done"), ("cancelled", "bad")]
    assert steps[1].at == run.finished_at


def test_it_builds_the_timeline_of_a_run_that_failed_while_running():
    t = timezone.now()
    run = TrainingRun(state=RunState.FAILED, created_at=t, admitted_at=t, applied_at=t, started_at=t, finished_at=t)
    assert [s.state for s in timeline(run)] == ["queued", "admitted", "pending", "running", "failed"]


def test_it_builds_the_timeline_of_a_succeeded_run():
    t = timezone.now()
    run = TrainingRun(state=RunState.SUCCEEDED, created_at=t, admitted_at=t, applied_at=t, started_at=t, finished_at=t)
    assert {s.status for s in timeline(run)} == {"done"}


def test_it_builds_the_timeline_of_a_pending_run():
    t = timezone.now()
    run = TrainingRun(state=RunState.PENDING, created_at=t, admitted_at=t, applied_at=t)
    assert [s.status for s in timeline(run)] == ["done", "done", "current", "todo", "todo"]


# -- logs --------------------------------------------------------------------------------------------


def test_it_refreshes_logs_while_running_and_stops_once_final(client, member, team, quota, published, fake_backend):
    run = set_state(submit_run_as(member, team), RunState.RUNNING, started_at=timezone.now())
    fake_backend.pod_lists[(run.namespace, run.object_name)] = [pod(run.object_name, "Running", 2)]
    client.force_login(member)
    response = client.get(f"/runs/{run.pk}/logs/", **HTMX)
    html = response.content.decode()
    assert response.status_code == 200 and "log line 0" in html and 'hx-trigger="every 3s"' in html
    assert "<html" not in html
    set_state(run, RunState.SUCCEEDED, finished_at=timezone.now())
    response = client.get(f"/runs/{run.pk}/logs/", **HTMX)
    assert response.status_code == 286 and "hx-trigger" not in response.content.decode()


def test_it_lets_viewers_read_logs_but_not_post(client, member, viewer, team, quota, published, fake_backend):
    run = submit_run_as(member, team)
    client.force_login(viewer)
    assert client.get(f"/runs/{run.pk}/logs/").status_code == 200
    assert client.post(f"/runs/{run.pk}/logs/").status_code == 405


# -- cancel ------------------------------------------------------------------------------------------


def test_it_cancels_a_run(client, member, team, quota, published, django_capture_on_commit_callbacks):
    run = submit_run_as(member, team)
    client.force_login(member)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/runs/{run.pk}/cancel/")
    assert response.status_code == 302 and response.url == f"/runs/{run.pk}/"
    run.refresh_from_db()
    assert run.state == RunState.CANCELLED and run.reason == "cancelled by mia"
    assert not QuotaHold.objects.held().exists()
    assert ("workloads.tasks.delete_workload", ("run", run.pk)) in published
    assert "Run bert-finetune cancelled." in client.get(response.url).content.decode()


def test_it_cancels_for_htmx_with_the_new_status_panel(client, member, team, quota, published):
    run = submit_run_as(member, team)
    client.force_login(member)
    response = client.post(f"/runs/{run.pk}/cancel/", **HTMX)
    html = response.content.decode()
    assert response.status_code == 286  # the panel stops polling
    assert 'id="run-status"' in html and "badge cancelled" in html and "<html" not in html


def test_it_answers_409_for_htmx_when_the_run_already_finished(client, member, team, quota, published):
    run = set_state(submit_run_as(member, team), RunState.SUCCEEDED, finished_at=timezone.now())
    client.force_login(member)
    response = client.post(f"/runs/{run.pk}/cancel/", **HTMX)
    assert response.status_code == 409
    assert "already finished (succeeded)" in response.content.decode()
    response = client.post(f"/runs/{run.pk}/cancel/", follow=True)
    assert response.status_code == 200 and "already finished (succeeded)" in response.content.decode()
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED


def test_it_forbids_viewers_to_cancel(client, member, viewer, team, quota, published):
    run = submit_run_as(member, team)
    client.force_login(viewer)
    assert client.post(f"/runs/{run.pk}/cancel/").status_code == 403
    run.refresh_from_db()
    assert run.state == RunState.ADMITTED


def test_a_get_on_cancel_asks_to_confirm_and_cancels_nothing(client, member, viewer, team, quota, published):
    """The page an idle alert links to: it asks; only its form's POST cancels."""
    run = submit_run_as(member, team)
    client.force_login(member)
    response = client.get(f"/runs/{run.pk}/cancel/")
    html = response.content.decode()
    assert response.status_code == 200 and "Cancel bert-finetune?" in html
    assert '<form method="post">' in html and "back to ML Research's quota" in html
    run.refresh_from_db()
    assert run.state == RunState.ADMITTED
    assert client.put(f"/runs/{run.pk}/cancel/").status_code == 405
    client.force_login(viewer)  # who may not cancel is not asked to
    assert client.get(f"/runs/{run.pk}/cancel/").status_code == 403


def test_the_cancel_page_of_an_ended_run_offers_nothing(client, member, team, quota, published):
    run = set_state(submit_run_as(member, team), RunState.SUCCEEDED)
    client.force_login(member)
    html = client.get(f"/runs/{run.pk}/cancel/").content.decode()
    assert "has ended" in html and '<form method="post">' not in html


# -- run again: the form prefilled, never a blind resubmit ---------------------------------------------


def test_it_opens_the_form_prefilled_with_a_finished_runs_request(client, member, team, quota, published):
    old = set_state(submit_run_as(member, team, args=["--note", "hello world", "it's"], cpu=4.5,
                                  max_runtime_minutes=90,
                                  volumes=[{"claim": "datasets", "mount_path": "/data", "read_only": True}]),
                    RunState.SUCCEEDED, finished_at=timezone.now())
    client.force_login(member)
    response = client.get(f"/runs/new/?from={old.pk}")
    assert response.status_code == 200
    form = response.context["form"]
    assert form.initial["name"] == "bert-finetune-2"  # a copy is another run: a fresh name
    assert form.initial["command"] == "python train.py"
    assert form.initial["args"] == "--note 'hello world' 'it'\"'\"'s'"
    html = response.content.decode()
    assert 'value="registry.example.com/ml/trainer:1.4"' in html and 'value="4.5"' in html and 'value="90"' in html
    assert "datasets:/data:ro" in html and "WANDB_MODE=offline" in html
    assert '<option value="a100-80gb" selected>' in html
    # The argv echo already shows what it will run.
    assert '<span class="token">&quot;hello world&quot;</span>' in html
    assert TrainingRun.objects.count() == 1  # opening the form submits nothing


def test_it_submits_the_edited_prefilled_form_as_a_new_run(client, member, team, quota, published):
    old = set_state(submit_run_as(member, team), RunState.FAILED, finished_at=timezone.now())
    client.force_login(member)
    data = {k: v for k, v in client.get(f"/runs/new/?from={old.pk}").context["form"].initial.items() if v}
    data.update(args="--epochs 5", spot="on")
    response = client.post("/runs/new/", data)
    new = TrainingRun.objects.exclude(pk=old.pk).get()
    assert response.status_code == 302 and response.url == f"/runs/{new.pk}/"
    assert (new.name, new.image, new.command, new.env) == (f"{old.name}-2", old.image, old.command, old.env)
    assert new.args == ["--epochs", "5"] and new.spot and new.gpus_per_worker == old.gpus_per_worker


def test_it_suggests_a_free_name_when_the_run_is_still_active(client, member, team, quota, published):
    old = submit_run_as(member, team)
    client.force_login(member)
    assert client.get(f"/runs/new/?from={old.pk}").context["form"].initial["name"] == "bert-finetune-2"


def test_a_prefilled_form_shows_its_price_and_says_what_it_copies(client, member, team, quota, published):
    old = set_state(submit_run_as(member, team, gpus_per_worker=2, spot=True), RunState.SUCCEEDED,
                    finished_at=timezone.now())
    client.force_login(member)
    html = client.get(f"/runs/new/?from={old.pk}").content.decode()
    # Previewed on load: the copy's price (2 spot A100s), not "Pick a flavor".
    assert "Pick a flavor" not in html and "<strong>Starts now</strong>" in html
    assert "3.28 USD</strong> per hour" in html
    assert f'A copy of <a href="/runs/{old.pk}/">#{old.pk} bert-finetune</a>' in html
    html = client.get("/runs/new/?flavor=a100-80gb").content.decode()  # a quota bar's link
    assert "Pick a flavor" not in html and "per hour" in html and "A copy of" not in html
    assert "Pick a flavor" in client.get("/runs/new/").content.decode()


def test_it_links_run_again_to_the_prefilled_form(client, member, team, quota, published):
    run = set_state(submit_run_as(member, team), RunState.SUCCEEDED, finished_at=timezone.now())
    client.force_login(member)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'href="/runs/new/?from={run.pk}"' in html and "/rerun/" not in html
    assert client.post(f"/runs/{run.pk}/rerun/").status_code == 404  # no blind resubmit any more


def test_it_prefills_nothing_from_another_teams_run(client, member, outsider, other_team, team, quota, published,
                                                    flavors):
    seed_team_quotas(other_team, {"a100-80gb": 2})
    theirs = submit_run_as(outsider, other_team, name="secret-vision-run", gpus_per_worker=1)
    client.force_login(member)
    assert client.get(f"/runs/new/?from={theirs.pk}").status_code == 404
    assert client.get("/runs/new/?from=abc").status_code == 404
    assert client.get("/runs/new/?from=999999").status_code == 404


def test_it_copies_a_run_of_another_of_my_teams_into_nothing(client, member, other_team, team, quota, published,
                                                             flavors):
    seed_team_quotas(other_team, {"a100-80gb": 2})
    add_member(other_team, member, Role.MEMBER)
    theirs = submit_run_as(member, other_team, name="vision-run", gpus_per_worker=1)
    client.force_login(member)
    response = client.get(f"/runs/new/?from={theirs.pk}", follow=True)
    assert response.status_code == 200 and response.context["form"].initial == {}
    assert "belongs to Vision: switch to that team to run it again" in response.content.decode()


def test_it_forbids_viewers_to_run_again(client, member, viewer, team, quota, published):
    run = submit_run_as(member, team)
    client.force_login(viewer)
    form = client.get(f"/runs/new/?from={run.pk}")
    assert form.status_code == 403  # shown, disabled, with why: never submittable
    html = form.content.decode()
    assert '<fieldset class="plain" disabled>' in html and "Viewers can&#x27;t submit — ask a team admin." in html
    assert 'hx-post="/runs/preview/"' not in html
    detail = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'href="/runs/new/?from={run.pk}"' not in detail
    assert '<button type="button" disabled title="Viewers can&#x27;t submit — ask a team admin."' in detail
    assert client.post("/runs/new/", form_data()).status_code == 403
    assert TrainingRun.objects.count() == 1


# -- dashboard ---------------------------------------------------------------------------------------


def test_it_shows_quota_bars_budget_queue_and_recent_runs(client, member, team, quota, published):
    for i in range(6):
        submit_run_as(member, team, name=f"run-{i}", gpus_per_worker=2)  # four fit in 8, two queue
    client.force_login(member)
    response = client.get("/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'aria-label="8 of 8 in use"' in html and 'aria-label="0 of 2 in use"' in html
    assert '<span class="badge queued">4</span>' in html  # queued units of a100-80gb
    # Holding quota: admitted, pending or running (four); the two queued are counted apart.
    assert '<span class="stat-value">4</span><span class="stat-label">runs holding quota · 2 queued' in html
    assert '<span class="stat-value">0</span><span class="stat-label">endpoints holding quota · 0 queued' in html
    assert "spent this month of 100,000.00 USD" in html  # the monthly budget
    assert ">run-5</a>" in html and ">run-1</a>" in html and ">run-0</a>" not in html  # the five newest
    assert html.count('hx-trigger="every 3s"') == 5
    assert 'href="/runs/new/"' in html
    assert QueuedRequest.objects.count() == 2


def test_it_hides_the_new_run_button_on_the_dashboard_from_viewers(client, viewer, quota):
    client.force_login(viewer)
    html = client.get("/").content.decode()
    assert "GPU quota" in html and 'href="/runs/new/"' not in html


def test_it_renders_the_dashboard_in_a_constant_number_of_queries(client, member, team, quota, published,
                                                                   django_assert_num_queries):
    client.force_login(member)
    submit_run_as(member, team, name="one")
    client.get("/")
    # session, user, current membership, access check, recent runs, usage (quotas, holds,
    # queue), budget (budget, month's spend in the ledger, open segments of all kinds, commitments
    # of all kinds), per kind its holding and queued counts (one for each registered kind, the
    # test-only kind too), spend by kind (ledger, open segments), switcher memberships, the recent
    # runs' quota holds (their money)
    with django_assert_num_queries(16 + len(kinds())):
        client.get("/")
    for i in range(8):
        submit_run_as(member, team, name=f"more-{i}", gpus_per_worker=1)
    with django_assert_num_queries(16 + len(kinds())):
        client.get("/")


# -- running time --------------------------------------------------------------------------------


def test_pages_say_how_long_a_run_ran_or_has_been_running(client, member, team, quota, published):
    """Issue 20: no run duration was shown anywhere."""
    now = timezone.now()
    done = set_state(submit_run_as(member, team, name="done"), RunState.SUCCEEDED, started_at=now - timedelta(hours=3),
                     finished_at=now - timedelta(hours=1, minutes=55))
    busy = set_state(submit_run_as(member, team, name="busy"), RunState.RUNNING, started_at=now - timedelta(seconds=95))
    waiting = submit_run_as(member, team, name="waiting")  # not started: no running time
    client.force_login(member)
    listing = client.get("/runs/").content.decode()
    assert f'<span id="run-{done.pk}-ran">ran 1 h 05 min</span>' in listing
    assert f'<span id="run-{busy.pk}-ran">running 1 min 3' in listing  # 1 min 35 s, give or take the request
    assert f'<span id="run-{waiting.pk}-ran">—</span>' in listing
    assert '<dt>Ran for</dt><dd id="run-time">1 h 05 min</dd>' in client.get(f"/runs/{done.pk}/").content.decode()
    assert '<dt>Running for</dt><dd id="run-time">1 min 3' in client.get(f"/runs/{busy.pk}/", **HTMX).content.decode()
    assert 'id="run-time"' not in client.get(f"/runs/{waiting.pk}/").content.decode()
    # The state poll carries the running time along (out of band), as it does the cost.
    poll = client.get(f"/runs/{busy.pk}/state/", **HTMX).content.decode()
    assert f'<span id="run-{busy.pk}-ran" hx-swap-oob="true">running 1 min 3' in poll
    assert "ran 1 h 05 min" in client.get("/").content.decode()  # the dashboard's recent runs


def test_numbers_are_number_inputs_with_their_bounds(client, member, team, quota, published):
    client.force_login(member)
    html = client.get("/runs/new/").content.decode()
    for name in ("gpus_per_worker", "workers", "cpu", "memory_gb", "shm_gb", "max_retries", "max_runtime_minutes"):
        tag = re.search(rf'<input [^>]*name="{name}"[^>]*>', html).group(0)
        assert 'type="number"' in tag and 'min="' in tag, tag
