"""The checkpoint contract on runs (docs/api.md "The checkpoint contract (runs)", issue #24).

Validation of ``checkpoint``; the run token (made at submission, in the run's Secret only,
good for its own run's ``checkpoints/`` and nothing else, dead once the run ends); the last
checkpoint on the API and the run page; the attempt counted by a requeue and read by the pods.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.constants import RunState
from jobs.kind import TrainingKind
from jobs.models import TrainingRun
from jobs.validation import parse_run_request
from teams.models import Role
from tests.factories import add_member, make_user, secret_values
from tests.jobs.conftest import post_run, run_payload
from workloads import lifecycle, secrets
from workloads.registry import kind_for

pytestmark = pytest.mark.django_db

CONTRACT_ENV = ("SLIPWAY_CHECKPOINT_DIR", "SLIPWAY_ATTEMPT", "SLIPWAY_RESUME_FROM", "SLIPWAY_RUN_TOKEN",
                "SLIPWAY_CHECKPOINT_URL")


def fields(**overrides) -> dict:
    data = run_payload(**overrides)
    data.pop("team")
    return data


# -- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("checkpoint", "stored"), [
    (None, None),
    ({}, {"grace_seconds": 60, "volume": None}),
    ({"grace_seconds": 1}, {"grace_seconds": 1, "volume": None}),
    ({"grace_seconds": 600, "volume": "team-ckpts"}, {"grace_seconds": 600, "volume": "team-ckpts"}),
    ({"grace_seconds": "90", "volume": None}, {"grace_seconds": 90, "volume": None}),
    ({"volume": ""}, {"grace_seconds": 60, "volume": None}),
])
def test_it_accepts_a_contract(checkpoint, stored) -> None:
    request = parse_run_request(fields(checkpoint=checkpoint))
    assert request.as_fields()["checkpoint"] == stored


@pytest.mark.parametrize(("checkpoint", "field", "words"), [
    ({"grace_seconds": 0}, "checkpoint", "grace_seconds: Must be between 1 and 600."),
    ({"grace_seconds": 601}, "checkpoint", "grace_seconds: Must be between 1 and 600."),
    ({"grace_seconds": True}, "checkpoint", "grace_seconds: Must be a whole number."),
    ({"grace_seconds": 1.5}, "checkpoint", "grace_seconds: Must be a whole number."),
    ({"grace_seconds": "1e3"}, "checkpoint", "grace_seconds: Must be a whole number."),
    ({"volume": "Not_A_Claim"}, "checkpoint", "volume: Must be the name of a PersistentVolumeClaim"),
    ({"volume": 7}, "checkpoint", "volume: Must be the name of a PersistentVolumeClaim"),
    ({"grace": 60}, "checkpoint", "Unknown field(s) grace"),
    ({"grace_seconds": 60, "hostPath": "/"}, "checkpoint", "Unknown field(s) hostPath"),
    (True, "checkpoint", "Must be an object"),
    ("yes", "checkpoint", "Must be an object"),
    ([60], "checkpoint", "Must be an object"),
])
def test_it_refuses_a_bad_contract_with_field_errors(checkpoint, field, words) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_run_request(fields(checkpoint=checkpoint))
    assert any(words in message for message in caught.value.message_dict[field]), caught.value.message_dict


@pytest.mark.parametrize("name", CONTRACT_ENV)
def test_the_contracts_variables_are_its_own(name: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_run_request(fields(env={name: "x"}, checkpoint={}))
    assert "set by the checkpoint contract" in caught.value.message_dict["env"][0]
    with pytest.raises(ValidationError) as caught:
        parse_run_request(fields(secret_env={name: "x"}, checkpoint={}))
    assert "set by the checkpoint contract" in caught.value.message_dict["secret_env"][0]
    # Without the contract they are the user's, as before.
    assert parse_run_request(fields(env={name: "x"})).checkpoint is None


def test_a_volume_may_not_sit_where_the_checkpoints_are_mounted() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_run_request(fields(checkpoint={}, volumes=[{"claim": "data", "mount_path": "/slipway/checkpoints/x"}]))
    assert "checkpoint contract" in caught.value.message_dict["volumes"][0]


def test_the_api_answers_400_with_the_field_errors(api, quota, published) -> None:
    response = api.post("/api/v1/runs/", run_payload(checkpoint={"grace_seconds": 0, "extra": 1}), format="json")
    assert response.status_code == 400
    assert "checkpoint" in response.json()["errors"]
    assert not TrainingRun.objects.exists()


# -- submission, token, API fields ----------------------------------------------------------------


def token_of(run_id: int) -> str:
    return secret_values(f"run:{run_id}")["SLIPWAY_RUN_TOKEN"]


def run_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_a_run_with_the_contract_shows_it_and_gets_a_token_nobody_sees(api, quota, published) -> None:
    body = post_run(api, checkpoint={"grace_seconds": 120}, secret_env={"HF_TOKEN": "hf_x"})
    assert body["checkpoint"] == {"grace_seconds": 120, "volume": None}
    assert body["last_checkpoint"] is None and body["attempt"] == 1
    token = token_of(body["id"])
    assert token.startswith("slr_") and len(token) > 40
    run = TrainingRun.objects.get(pk=body["id"])
    assert run.run_token_hash and token not in run.run_token_hash
    # Shown nowhere: not among the secret env names, not in the API's answers nor the manifest.
    assert body["secret_env"] == {"HF_TOKEN": "••••••"}
    for path in ("", "manifest/", "manifest/?format=yaml"):
        assert token not in api.get(f"/api/v1/runs/{body['id']}/{path}").content.decode()
    # The Secret the apply task writes holds it, under the key the pods read.
    secret = secrets.env_secret(run)
    assert set(secret["data"]) == {"HF_TOKEN", "SLIPWAY_RUN_TOKEN"}


def test_a_run_without_the_contract_has_none_of_it(api, quota, published) -> None:
    body = post_run(api)
    assert body["checkpoint"] is None and body["last_checkpoint"] is None and body["attempt"] == 1
    assert TrainingRun.objects.get(pk=body["id"]).run_token_hash == ""
    assert not secrets.names(TrainingRun.objects.get(pk=body["id"]))
    manifest = api.get(f"/api/v1/runs/{body['id']}/manifest/").json()
    assert [o["kind"] for o in manifest] == ["Job"]
    assert not {e["name"] for e in manifest[0]["spec"]["template"]["spec"]["containers"][0]["env"]} & set(CONTRACT_ENV)


def test_the_manifest_carries_the_contract(api, quota, published) -> None:
    body = post_run(api, checkpoint={"grace_seconds": 45}, workers=2)
    manifest = api.get(f"/api/v1/runs/{body['id']}/manifest/").json()
    assert [o["kind"] for o in manifest] == ["PyTorchJob", "PersistentVolumeClaim"]
    assert manifest[1]["metadata"]["name"] == f"run-{body['id']}-checkpoints"
    for replica in manifest[0]["spec"]["pytorchReplicaSpecs"].values():
        pod = replica["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] == 45
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["SLIPWAY_ATTEMPT"]["value"] == "1" and env["SLIPWAY_RESUME_FROM"]["value"] == ""
        assert "valueFrom" in env["SLIPWAY_RUN_TOKEN"]


# -- reporting with the token ---------------------------------------------------------------------


def test_the_token_reports_its_runs_checkpoints(api, quota, published) -> None:
    body = post_run(api, checkpoint={})
    client = run_client(token_of(body["id"]))
    response = client.post(f"/api/v1/runs/{body['id']}/checkpoints/", {"step": 1000, "path": "/slipway/checkpoints/s1000.pt"},
                           format="json")
    assert response.status_code == 201, response.content
    assert response.json()["step"] == 1000 and response.json()["path"] == "/slipway/checkpoints/s1000.pt"
    assert set(response.json()) == {"at", "step", "path"}  # nothing else of the run
    shown = api.get(f"/api/v1/runs/{body['id']}/").json()["last_checkpoint"]
    assert shown["step"] == 1000 and shown["path"] == "/slipway/checkpoints/s1000.pt" and shown["at"]
    # The newest report wins, even with a lower step (a run resumed from an older checkpoint).
    assert client.post(f"/api/v1/runs/{body['id']}/checkpoints/", {"step": 400, "path": "/slipway/checkpoints/s400.pt"},
                       format="json").status_code == 201
    assert api.get(f"/api/v1/runs/{body['id']}/").json()["last_checkpoint"]["step"] == 400
    # The run page's status panel shows it.
    api.force_login(TrainingRun.objects.get(pk=body["id"]).created_by)
    page = api.get(f"/runs/{body['id']}/").content.decode()
    assert "/slipway/checkpoints/s400.pt" in page and "step 400" in page
    assert token_of(body["id"]) not in page


@pytest.mark.parametrize(("report", "field"), [
    ({"path": "/x"}, "step"),
    ({"step": -1, "path": "/x"}, "step"),
    ({"step": "ten", "path": "/x"}, "step"),
    ({"step": 2**63, "path": "/x"}, "step"),
    ({"step": 1}, "path"),
    ({"step": 1, "path": ""}, "path"),
    ({"step": 1, "path": 7}, "path"),
    ({"step": 1, "path": "a" * 1001}, "path"),
    ({"step": 1, "path": "/x\n"}, "path"),
    ({"step": 1, "path": "/slipway/checkpoints/x", "loss": 0.1}, "non_field_errors"),
    # Out of the checkpoint directory, where no next attempt can resume from (security review 4 #7).
    ({"step": 1, "path": "/x"}, "path"),
    ({"step": 1, "path": "/slipway/checkpoints/../../etc/passwd"}, "path"),
    ({"step": 1, "path": "../secrets"}, "path"),
    ({"step": 1, "path": "/slipway/checkpoints"}, "path"),
    ({"step": 1, "path": "/slipway/checkpointsX/a"}, "path"),
    # A whole number as JSON, never as a string (security review 5 #9e).
    ({"step": "1", "path": "/slipway/checkpoints/a"}, "step"),
    # A relative path that fits the 1,000 characters but not once under /slipway/checkpoints/ (review 5 #8).
    ({"step": 1, "path": "a" * 990}, "path"),
    ({"step": 1, "path": "a" * 1000}, "path"),
])
def test_a_bad_report_is_a_400_with_field_errors(api, quota, published, report, field) -> None:
    body = post_run(api, checkpoint={})
    response = run_client(token_of(body["id"])).post(f"/api/v1/runs/{body['id']}/checkpoints/", report, format="json")
    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert TrainingRun.objects.get(pk=body["id"]).last_checkpoint is None


def test_the_token_can_do_nothing_else(api, quota, published, team) -> None:
    first = post_run(api, name="first", checkpoint={})
    second = post_run(api, name="second", checkpoint={})
    client = run_client(token_of(first["id"]))
    report = {"step": 1, "path": "/slipway/checkpoints/p"}
    for method, path in (("get", "/api/v1/runs/"), ("get", f"/api/v1/runs/{first['id']}/"),
                         ("get", f"/api/v1/runs/{first['id']}/logs/"), ("get", f"/api/v1/runs/{first['id']}/manifest/"),
                         ("post", f"/api/v1/runs/{first['id']}/cancel/"), ("get", f"/api/v1/teams/{team.slug}/usage/"),
                         ("get", "/api/v1/endpoints/"), ("post", "/api/v1/runs/")):
        response = getattr(client, method)(path, {} if method == "post" else None, format="json")
        assert response.status_code == 401, (path, response.status_code)
    assert client.post(f"/api/v1/runs/{second['id']}/checkpoints/", report, format="json").status_code == 401
    assert TrainingRun.objects.get(pk=second["id"]).last_checkpoint is None
    assert TrainingRun.objects.get(pk=first["id"]).state != RunState.CANCELLED
    # A made-up run token, or one of a personal-token shape, is refused too.
    assert run_client("slr_" + "A" * 43).post(f"/api/v1/runs/{first['id']}/checkpoints/", report,
                                              format="json").status_code == 401
    assert APIClient().post(f"/api/v1/runs/{first['id']}/checkpoints/", report, format="json").status_code == 401


def test_the_token_dies_with_the_run(api, quota, published) -> None:
    body = post_run(api, checkpoint={})
    token = token_of(body["id"])
    assert api.post(f"/api/v1/runs/{body['id']}/cancel/").status_code == 202
    response = run_client(token).post(f"/api/v1/runs/{body['id']}/checkpoints/", {"step": 1, "path": "/slipway/checkpoints/p"}, format="json")
    assert response.status_code == 401
    # A member of the team hears why: the run has ended.
    assert api.post(f"/api/v1/runs/{body['id']}/checkpoints/", {"step": 1, "path": "/slipway/checkpoints/p"},
                    format="json").status_code == 409
    # And the token's value is gone from the database with the other secret values.
    assert secret_values(f"run:{body['id']}") == {}


def test_the_token_dies_when_the_run_ends_on_its_own(api, quota, published) -> None:
    body = post_run(api, checkpoint={})
    token = token_of(body["id"])
    TrainingRun.objects.filter(pk=body["id"]).update(state=RunState.SUCCEEDED, finished_at=timezone.now())
    response = run_client(token).post(f"/api/v1/runs/{body['id']}/checkpoints/", {"step": 1, "path": "/slipway/checkpoints/p"}, format="json")
    assert response.status_code == 401


def test_a_path_is_normalised_into_the_checkpoint_directory(api, quota, published) -> None:
    body = post_run(api, checkpoint={})
    client = run_client(token_of(body["id"]))
    for sent, kept in (("/slipway/checkpoints/./a//b/../step-3.pt", "/slipway/checkpoints/a/step-3.pt"),
                       ("step-4.pt", "/slipway/checkpoints/step-4.pt")):
        response = client.post(f"/api/v1/runs/{body['id']}/checkpoints/", {"step": 3, "path": sent}, format="json")
        assert response.status_code == 201 and response.json()["path"] == kept
        assert TrainingRun.objects.get(pk=body["id"]).last_checkpoint_path == kept


def test_a_checkpoint_line_out_of_the_directory_is_not_taken():
    from jobs.checkpoints import last_in_log

    lines = ["SLIPWAY_CHECKPOINT step=7 path=/slipway/checkpoints/step-7",
             "SLIPWAY_CHECKPOINT step=8 path=/slipway/checkpoints/../../root/x"]
    assert last_in_log(lines) == (7, "/slipway/checkpoints/step-7", None)


def test_only_the_owner_or_a_team_admin_report_by_hand(api, quota, published, api_client_for, team, team_admin) -> None:
    """Security review 4 #7: a teammate may not move someone else's run's resume point."""
    body = post_run(api, checkpoint={})
    teammate = make_user("tess")
    add_member(team, teammate, Role.MEMBER)
    report = {"step": 5, "path": "/slipway/checkpoints/5"}
    refused = api_client_for(teammate).post(f"/api/v1/runs/{body['id']}/checkpoints/", report, format="json")
    assert refused.status_code == 403 and TrainingRun.objects.get(pk=body["id"]).last_checkpoint is None
    assert api_client_for(team_admin).post(f"/api/v1/runs/{body['id']}/checkpoints/", report,
                                           format="json").status_code == 201


def test_members_may_report_viewers_may_not_outsiders_see_nothing(api, quota, published, api_client_for, viewer,
                                                                  outsider) -> None:
    body = post_run(api, checkpoint={})
    report = {"step": 5, "path": "/slipway/checkpoints/5"}
    assert api.post(f"/api/v1/runs/{body['id']}/checkpoints/", report, format="json").status_code == 201  # its owner
    assert api_client_for(viewer).post(f"/api/v1/runs/{body['id']}/checkpoints/", report,
                                       format="json").status_code == 403
    assert api_client_for(outsider).post(f"/api/v1/runs/{body['id']}/checkpoints/", report,
                                         format="json").status_code == 404
    # A run without the contract has nothing to report to.
    plain = post_run(api, name="plain")
    assert api.post(f"/api/v1/runs/{plain['id']}/checkpoints/", report, format="json").status_code == 409


# -- attempts -----------------------------------------------------------------------------------


def test_a_requeue_starts_the_next_attempt_from_the_last_checkpoint(api, quota, published) -> None:
    body = post_run(api, checkpoint={"grace_seconds": 90})
    run_client(token_of(body["id"])).post(f"/api/v1/runs/{body['id']}/checkpoints/",
                                          {"step": 700, "path": "/slipway/checkpoints/s700.pt"}, format="json")
    kind = kind_for("run")
    assert isinstance(kind, TrainingKind)
    now = timezone.now()
    TrainingRun.objects.filter(pk=body["id"]).update(state=RunState.RUNNING, preempting_since=now)
    run = TrainingRun.objects.select_related("team", "flavor").get(pk=body["id"])
    assert kind.preemption_grace(run) == 90
    assert lifecycle.requeue(kind, run, now)
    run = TrainingRun.objects.select_related("team", "flavor").get(pk=body["id"])
    assert run.attempt == 2 and run.state == RunState.QUEUED
    assert api.get(f"/api/v1/runs/{body['id']}/").json()["attempt"] == 2
    env = {e["name"]: e.get("value") for e in kind.manifests(run)[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SLIPWAY_ATTEMPT"] == "2" and env["SLIPWAY_RESUME_FROM"] == "/slipway/checkpoints/s700.pt"


# -- the portal's form --------------------------------------------------------------------------


def test_the_new_run_form_opts_in_and_run_again_keeps_it(client, member, quota, published, fake_backend) -> None:
    from tests.jobs.test_views import form_data

    client.force_login(member)
    response = client.post("/runs/new/", form_data(checkpoint="on", checkpoint_grace_seconds="150"))
    assert response.status_code == 302
    run = TrainingRun.objects.get()
    assert run.checkpoint == {"grace_seconds": 150, "volume": None} and run.run_token_hash
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Checkpoint contract" in page and "none reported yet" in page
    assert token_of(run.pk) not in page
    again = client.get(f"/runs/new/?from={run.pk}").content.decode()
    assert re.search(r'<input type="checkbox" name="checkpoint"[^>]* checked', again)
    assert re.search(r'name="checkpoint_grace_seconds" value="150"', again)
    # Out of range: the error is shown with the form, nothing is created.
    bad = client.post("/runs/new/", form_data(name="other", checkpoint="on", checkpoint_grace_seconds="601"))
    assert bad.status_code == 400 and "Must be between 1 and 600" in bad.content.decode()
    assert TrainingRun.objects.count() == 1
    # Unticked: no contract, whatever the grace says.
    client.post("/runs/new/", form_data(name="plain", checkpoint_grace_seconds="30"))
    assert TrainingRun.objects.get(name="plain").checkpoint is None


def test_run_again_carries_the_whole_contract_over_with_the_teams_volume(client, member, quota, published,
                                                                         fake_backend) -> None:
    """The copy's form holds the contract's grace and its volume (the team's claim): submitted
    unchanged, the new run has the same contract; emptied, Slipway provides the claim."""
    from tests.jobs.test_views import form_data

    client.force_login(member)
    response = client.post("/runs/new/", form_data(checkpoint="on", checkpoint_grace_seconds="150",
                                                   checkpoint_volume="team-ckpts"))
    assert response.status_code == 302
    old = TrainingRun.objects.get()
    assert old.checkpoint == {"grace_seconds": 150, "volume": "team-ckpts"}
    again = client.get(f"/runs/new/?from={old.pk}")
    assert re.search(r'name="checkpoint_volume" value="team-ckpts"', again.content.decode())
    # Submitted as the browser sends the prefilled form (an unticked box is not sent).
    data = {k: ("on" if v is True else v) for k, v in again.context["form"].initial.items() if v}
    assert client.post("/runs/new/", data).status_code == 302
    copy = TrainingRun.objects.exclude(pk=old.pk).get()
    assert copy.checkpoint == old.checkpoint
    claims = [v["persistentVolumeClaim"]["claimName"] for v in TrainingKind().manifests(copy)[0]["spec"]["template"]
              ["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert "team-ckpts" in claims and f"{copy.object_name}-checkpoints" not in claims
    # The volume emptied: Slipway's own claim. A bad name is the contract's error, nothing created.
    client.post("/runs/new/", {**data, "name": "own-claim", "checkpoint_volume": ""})
    assert TrainingRun.objects.get(name="own-claim").checkpoint == {"grace_seconds": 150, "volume": None}
    bad = client.post("/runs/new/", {**data, "name": "bad-claim", "checkpoint_volume": "Not_A_Claim"})
    assert bad.status_code == 400 and "volume: Must be the name of a PersistentVolumeClaim" in bad.content.decode()
    assert not TrainingRun.objects.filter(name="bad-claim").exists()


def test_the_log_line_is_found_with_a_loggers_prefix_and_the_last_one_wins():
    from jobs.checkpoints import last_in_log

    lines = ["2026-11-24 09:00:01 INFO SLIPWAY_CHECKPOINT step=10 path=/slipway/checkpoints/step-10",
             "SLIPWAY_CHECKPOINT step=x path=/bad", "loss=0.3",
             "SLIPWAY_CHECKPOINT step=20 path=/slipway/checkpoints/step-20", "SLIPWAY_CHECKPOINT step=30"]
    assert last_in_log(lines) == (20, "/slipway/checkpoints/step-20", None)  # no time stamp on that line
    assert last_in_log(["nothing here"]) is None
    # A leading RFC 3339 stamp (the sandbox's lines, timestamped cluster logs) is when it was written.
    stamped = "2026-11-24T09:00:05Z INFO  SLIPWAY_CHECKPOINT step=40 path=/slipway/checkpoints/step-40"
    assert last_in_log([stamped]) == (40, "/slipway/checkpoints/step-40", datetime(2026, 11, 24, 9, 0, 5, tzinfo=UTC))


def test_the_stored_length_limit_is_named_and_the_longest_relative_path_fits(api, quota, published) -> None:
    """Review 5 #8: a relative path of 980-1,000 characters outgrew the column once under its directory (a 500)."""
    body = post_run(api, checkpoint={})
    client = run_client(token_of(body["id"]))
    url = f"/api/v1/runs/{body['id']}/checkpoints/"
    longest = 1000 - len("/slipway/checkpoints/")
    too_long = client.post(url, {"step": 1, "path": "a" * (longest + 1)}, format="json")
    assert too_long.status_code == 400
    assert "at most 1000 characters as stored" in too_long.json()["errors"]["path"][0]
    assert f"a relative path at most {longest}" in too_long.json()["errors"]["path"][0]
    fits = client.post(url, {"step": 1, "path": "a" * longest}, format="json")
    assert fits.status_code == 201 and len(fits.json()["path"]) == 1000


def test_a_checkpoint_line_too_long_once_under_its_directory_is_skipped() -> None:
    from jobs.checkpoints import last_in_log
    lines = ["SLIPWAY_CHECKPOINT step=1 path=ok", "SLIPWAY_CHECKPOINT step=2 path=" + "b" * 990]
    assert last_in_log(lines) == (1, "/slipway/checkpoints/ok", None)
