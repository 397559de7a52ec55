"""Every verb of ``slipway`` against a live server (issue 26, "The command line and the Python client")."""

from __future__ import annotations

import json
import stat
from datetime import timedelta

import httpx
import jsonschema
import pytest
import yaml
from django.utils import timezone

from jobs.models import TrainingRun
from slipway import config, polling
from slipway.client import DEVICE_GRANT_TYPE, Client, DeviceLoginFailed, NotSignedIn, new_lines
from tests.factories import secret_values
from tests.fakes import pod
from tests.jobs.conftest import run_payload
from tests.jobs.test_attempt_logs import preempt_and_requeue
from workloads.cycle.reconcile import reconcile
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db(transaction=True)


def write(path, payload) -> str:
    path.write_text(yaml.safe_dump(payload) if path.suffix == ".yaml" else json.dumps(payload))
    return str(path)


@pytest.fixture
def spec(tmp_path):
    return write(tmp_path / "spec.yaml", run_payload(max_retries=0))


def spec_lines(path: str) -> list[str]:
    with open(path) as handle:
        return handle.read().splitlines()


def run_id_of(output: str) -> int:
    """``run 7 bert-finetune: admitted`` → 7."""
    return int(output.split()[1])


# -- the OpenAPI schema -----------------------------------------------------------------------


def json_schema(openapi: dict, node):
    """OpenAPI 3.0's ``nullable`` as JSON Schema's ``null`` type, the rest unchanged (``$ref`` kept)."""
    if isinstance(node, list):
        return [json_schema(openapi, item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: json_schema(openapi, value) for key, value in node.items() if key != "nullable"}
    if node.get("nullable"):
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


#: Generating the whole OpenAPI document takes seconds of CPU: past httpx's default 5 s on a slow boot (2026-11-29).
SCHEMA_TIMEOUT = 60


def validator_for(live_server, path: str):
    openapi = yaml.safe_load(httpx.get(f"{live_server.url}/api/schema/", timeout=SCHEMA_TIMEOUT).text)
    response = openapi["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    document = {**json_schema(openapi, response), "components": json_schema(openapi, openapi["components"])}
    return jsonschema.Draft202012Validator(document)


def list_item_validator(live_server, path: str):
    """The schema of one item of the paginated list ``path`` serves (its page's ``results``)."""
    openapi = yaml.safe_load(httpx.get(f"{live_server.url}/api/schema/", timeout=SCHEMA_TIMEOUT).text)
    page = openapi["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    page = openapi["components"]["schemas"][page["$ref"].rsplit("/", 1)[1]]
    document = {**json_schema(openapi, page["properties"]["results"]["items"]),
                "components": json_schema(openapi, openapi["components"])}
    return jsonschema.Draft202012Validator(document)


# -- a whole session --------------------------------------------------------------------------


def test_run_ps_describe_logs_cancel(cli, spec, fake_backend, live_server):
    submitted = cli("run", "-f", spec)
    assert submitted.exit_code == 0, submitted.output
    run_id = run_id_of(submitted.stdout)
    assert submitted.stdout.startswith(f"run {run_id} bert-finetune: admitted")

    listed = cli("ps")
    assert listed.exit_code == 0
    header, row = listed.stdout.splitlines()[:2]
    assert header.split() == ["ID", "TEAM", "NAME", "STATE", "FLAVOR", "GPUS", "CREATED"]
    assert row.split()[:6] == [str(run_id), "ml-research", "bert-finetune", "admitted", "a100-80gb", "2"]
    assert "REASON" in cli("ps", "-o", "wide").stdout.splitlines()[0]
    assert yaml.safe_load(cli("ps", "-o", "yaml").stdout)[0]["id"] == run_id

    described = cli("describe", str(run_id))
    assert described.exit_code == 0
    assert "State:" in described.stdout and "admitted" in described.stdout
    assert "python train.py --epochs 3" in described.stdout

    run = TrainingRun.objects.get(pk=run_id)
    assert apply_workload("run", run_id) == "applied"
    run.refresh_from_db()
    fake_backend.set_running(run.namespace, run.object_name, 2)
    pod_name = fake_backend.pods(run)[0]["metadata"]["name"]
    fake_backend.log_lines[pod_name] = ["epoch 1 loss 0.9", "epoch 2 loss 0.5", "epoch 3 loss 0.3"]
    logs = cli("logs", str(run_id), "--tail", "2")
    assert logs.exit_code == 0
    assert logs.stdout.splitlines() == ["epoch 2 loss 0.5", "epoch 3 loss 0.3"]
    assert cli("logs", str(run_id), "--pod", pod_name).stdout.splitlines()[0] == "epoch 1 loss 0.9"
    missing_pod = cli("logs", str(run_id), "--pod", "nope")
    assert missing_pod.exit_code == 4 and "No such pod." in missing_pod.stderr

    cancelled = cli("cancel", str(run_id))
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.startswith(f"run {run_id} bert-finetune: ")
    again = cli("cancel", str(run_id))
    assert again.exit_code == 1 and "Traceback" not in again.output and again.stderr.startswith("Error: ")


def test_ps_and_describe_as_json_follow_the_openapi_schema(cli, spec, live_server):
    run_id = run_id_of(cli("run", "-f", spec).stdout)
    check = validator_for(live_server, "/api/v1/runs/{id}/")
    listed = json.loads(cli("ps", "-o", "json").stdout)
    assert [r["id"] for r in listed] == [run_id]
    for item in listed:
        check.validate(item)
    check.validate(json.loads(cli("describe", str(run_id), "-o", "json").stdout))
    with pytest.raises(jsonschema.ValidationError):  # the check would see a wrong field
        check.validate({**listed[0], "state": "napping"})


def test_every_json_output_follows_the_openapi_schema(cli, spec, tmp_path, ep_quota, live_server, fake_backend):
    """``-o json`` of the endpoint verbs and ``cost`` (``ps`` and ``describe``: above), item by item."""
    from tests.inference.conftest import endpoint_payload

    run_id = run_id_of(cli("run", "-f", spec).stdout)
    apply_workload("run", run_id)
    run = TrainingRun.objects.get(pk=run_id)
    an_hour_ago = (timezone.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    fake_backend.set_running(run.namespace, run.object_name, 2, started=an_hour_ago)
    reconcile(fake_backend)  # an hour of two GPUs on the ledger: the cost report has a row
    endpoint_spec = write(tmp_path / "endpoint.json", {"team": "ml-research", **endpoint_payload()})
    endpoint_id = int(cli("endpoint", "create", "-f", endpoint_spec).stdout.split()[1])
    endpoint_check = list_item_validator(live_server, "/api/v1/endpoints/")
    listed = json.loads(cli("endpoint", "ls", "-o", "json").stdout)
    assert [e["id"] for e in listed] == [endpoint_id]
    for item in listed:
        endpoint_check.validate(item)
    validator_for(live_server, "/api/v1/endpoints/{id}/").validate(
        json.loads(cli("endpoint", "describe", str(endpoint_id), "-o", "json").stdout))
    rows = json.loads(cli("cost", "--by", "flavor", "-o", "json").stdout)
    row_check = list_item_validator(live_server, "/api/v1/usage/")
    assert rows
    for row in rows:
        row_check.validate(row)
    yaml_rows = yaml.safe_load(cli("cost", "--by", "flavor", "-o", "yaml").stdout)
    assert [r["group"] for r in yaml_rows] == [r["group"] for r in rows] == ["a100-80gb"]  # the run still accrues


def test_dry_run_prints_the_decision_and_creates_nothing(cli, spec):
    result = cli("run", "-f", spec, "--dry-run")
    assert result.exit_code == 0, result.output
    assert "Decision:" in result.stdout and "admit" in result.stdout
    assert "Cost/hour:" in result.stdout and "Estimated start:" in result.stdout
    assert not TrainingRun.objects.exists()


def test_the_same_idempotency_key_creates_one_run(cli, spec):
    first = cli("run", "-f", spec, "--idempotency-key", "retry-7")
    second = cli("run", "-f", spec, "--idempotency-key", "retry-7")
    assert first.exit_code == second.exit_code == 0
    assert run_id_of(first.stdout) == run_id_of(second.stdout)
    assert TrainingRun.objects.count() == 1


def test_watch_exits_1_when_the_run_fails(cli, tmp_path, fake_backend, monkeypatch):
    """Between polls the cluster moves on and the reconciler observes it: running, then failed."""
    spec = write(tmp_path / "spec.json", run_payload(max_retries=0))
    steps = iter(["apply", "running", "failed"])

    def cluster_moves_on(_seconds):
        run = TrainingRun.objects.get()
        step = next(steps)
        started = timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        if step == "apply":
            apply_workload("run", run.pk)
        elif step == "running":
            fake_backend.set_running(run.namespace, run.object_name, 2, started=started)
        else:
            fake_backend.set_finished(run.namespace, run.object_name, ok=False, started=started, finished=started)
        reconcile(fake_backend)

    monkeypatch.setattr(polling, "pause", cluster_moves_on)
    result = cli("run", "-f", spec, "--watch")
    assert result.exit_code == 1, result.output
    states = [line.split()[2] for line in result.stdout.splitlines()[1:]]
    assert states[0] == "admitted" and states[-1] == "failed" and "running" in states


def test_watch_exits_0_when_the_run_succeeds(cli, spec, fake_backend, monkeypatch):
    def cluster_moves_on(_seconds):
        run = TrainingRun.objects.get()
        apply_workload("run", run.pk)
        run.refresh_from_db()
        now = timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        fake_backend.set_finished(run.namespace, run.object_name, ok=True, started=now, finished=now)
        reconcile(fake_backend)

    monkeypatch.setattr(polling, "pause", cluster_moves_on)
    result = cli("run", "-f", spec, "--watch")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1].split()[2] == "succeeded"


def test_logs_of_an_earlier_attempt_and_what_it_ran_of_the_runtime_limit(cli, tmp_path, fake_backend, live_server):
    spec = write(tmp_path / "limited.yaml", run_payload(max_retries=0, max_runtime_minutes=120))
    run_id = run_id_of(cli("run", "-f", spec).stdout)
    assert apply_workload("run", run_id) == "applied"
    run = TrainingRun.objects.get(pk=run_id)
    fake_backend.set_running(run.namespace, run.object_name, 2)
    fake_backend.log_lines[fake_backend.pods(run)[0]["metadata"]["name"]] = ["epoch 1 loss 0.9", "epoch 2 loss 0.5"]
    preempt_and_requeue(run, fake_backend)  # its pods and their logs are gone; attempt 1's were saved
    assert cli("logs", str(run_id)).stdout == ""
    earlier = cli("logs", str(run_id), "--attempt", "1", "--tail", "1")
    assert earlier.exit_code == 0 and earlier.stdout.splitlines() == ["epoch 2 loss 0.5"]
    never = cli("logs", str(run_id), "--attempt", "3")
    assert never.exit_code == 4 and "No attempt 3: its attempts are 1 to 2." in never.stderr
    assert cli("logs", str(run_id), "--attempt", "1", "-f").exit_code == 2
    # A limit counts every attempt: describe says what the earlier ones ran (the API's earlier_run_seconds).
    TrainingRun.objects.filter(pk=run_id).update(earlier_run_seconds=720)
    described = {line.partition(":")[0].strip(): line.partition(":")[2].strip()
                 for line in cli("describe", str(run_id)).stdout.splitlines()}
    assert described["Runtime limit"] == "120 min; its earlier attempts ran 12 min"


def test_logs_follow_prints_new_lines_until_the_run_ends(cli, spec, fake_backend, monkeypatch):
    run_id = run_id_of(cli("run", "-f", spec).stdout)
    apply_workload("run", run_id)
    run = TrainingRun.objects.get(pk=run_id)
    now = timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    fake_backend.pod_lists[(run.namespace, run.object_name)] = [pod(run.object_name, "Running", 2, now)]
    reconcile(fake_backend)
    name = fake_backend.pods(run)[0]["metadata"]["name"]
    fake_backend.log_lines[name] = ["zero", "one", "two"]  # --tail 2 shows the last two; the rest is not new

    def more_lines_then_the_end(_seconds):
        fake_backend.log_lines[name] += ["three", "two"]  # a repeated line is still a new line
        fake_backend.set_finished(run.namespace, run.object_name, ok=True, started=now, finished=now)
        reconcile(fake_backend)

    monkeypatch.setattr(polling, "pause", more_lines_then_the_end)
    result = cli("logs", str(run_id), "-f", "--tail", "2")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["one", "two", "three", "two"]


def test_new_lines_of_a_growing_tail_window():
    assert new_lines(["a", "b", "c"], ["b", "c", "d"]) == ["d"]
    assert new_lines(["a", "b"], ["a", "b"]) == []
    assert new_lines(["x"], ["y", "z"]) == ["y", "z"]
    assert new_lines([], ["a"]) == ["a"]


# -- bad input and refusals -------------------------------------------------------------------


def test_a_bad_yaml_file_names_its_line(cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bert\nimage: x\ncommand: [python\nflavor: a100-80gb\n")
    result = cli("run", "-f", str(bad))
    assert result.exit_code == 2  # usage: the spec is wrong, no workload failed
    assert "Traceback" not in result.output
    assert result.stderr.startswith(f"Error: {bad}, line ")
    not_a_mapping = tmp_path / "list.yaml"
    not_a_mapping.write_text("- a\n- b\n")
    assert "expected the API's fields as a mapping" in cli("run", "-f", str(not_a_mapping)).stderr
    assert cli("run", "-f", str(tmp_path / "absent.yaml")).exit_code == 2


def test_a_run_spec_holding_what_json_has_not_names_its_line(cli, tmp_path):
    """The run's spec file is read as a sweep's (slipway.specfile): an unquoted date is said, not sent."""
    spec = tmp_path / "dated.yaml"
    spec.write_text("name: bert\nimage: x\nenv:\n  SINCE: 2024-01-01\n")
    result = cli("run", "-f", str(spec))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {spec}, line 4, column 10: 2024-01-01 is a date or a time")
    assert not TrainingRun.objects.exists()


def test_a_field_refused_by_the_api_is_named_with_the_file(cli, tmp_path):
    spec = write(tmp_path / "spec.yaml", run_payload(gpus_per_worker=0))
    result = cli("run", "-f", spec)
    assert result.exit_code == 2  # usage, not 1: a script tells "my spec was wrong" from "my run failed"
    line = spec_lines(spec).index("gpus_per_worker: 0") + 1
    assert result.stderr.startswith(f"Error: {spec}, line {line}: gpus_per_worker: ")
    assert "Traceback" not in result.output
    assert not TrainingRun.objects.exists()


def test_a_json_spec_names_the_line_of_each_refused_field_even_nested(cli, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(run_payload(workers=0, checkpoint={"grace_seconds": 0}, bogus=1), indent=2))
    result = cli("run", "-f", str(spec))
    assert result.exit_code == 2 and "Traceback" not in result.output
    text = spec_lines(str(spec))
    workers_line = text.index('  "workers": 0,') + 1
    checkpoint_line = text.index('  "checkpoint": {') + 1
    lines = [line.removeprefix("Error: ") for line in result.stderr.splitlines()]
    assert any(line.startswith(f"{spec}, line {workers_line}: workers: ") for line in lines), lines
    assert any(line.startswith(f"{spec}, line {checkpoint_line}: checkpoint") for line in lines), lines
    assert all(line.startswith(f"{spec}") for line in lines)
    assert cli("run", "-f", str(spec), "--dry-run").exit_code == 2


def test_a_refused_token_says_to_run_login(cli, spec):
    result = cli("ps", SLIPWAY_TOKEN="not-a-token")
    assert result.exit_code == 3
    assert "not signed in: run `slipway login`" in result.stderr
    nothing = cli("ps", SLIPWAY_URL="", SLIPWAY_TOKEN="")
    assert nothing.exit_code == 3 and "slipway login" in nothing.stderr


def test_not_found_and_usage_errors_have_their_exit_codes(cli):
    assert cli("describe", "999999").exit_code == 4
    # A word is a name (issue 46 F.6), looked up in the caller's teams: none is a not-found, not a usage error.
    assert cli("describe", "seven").exit_code == 4
    assert cli("ps", "-o", "xml").exit_code == 2
    assert cli("cost", "--month", "November").exit_code == 2
    assert "Exit codes:" in cli("--help").stdout


# -- login and profiles -----------------------------------------------------------------------


def test_login_checks_the_token_and_saves_a_private_profile(cli, env, tmp_path):
    url, token = env["SLIPWAY_URL"], env["SLIPWAY_TOKEN"]
    result = cli("--profile", "work", "login", "--url", url, "--token", input=f"{token}\n", SLIPWAY_URL="",
                 SLIPWAY_TOKEN="")
    assert result.exit_code == 0, result.output
    assert "ml-research" in result.stdout
    path = tmp_path / "config" / "slipway" / "config.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert token in path.read_text()
    # The profile alone connects; another profile is not signed in.
    assert cli("--profile", "work", "ps", SLIPWAY_URL="", SLIPWAY_TOKEN="").exit_code == 0
    assert cli("ps", SLIPWAY_URL="", SLIPWAY_TOKEN="").exit_code == 3
    refused = cli("login", "--url", url, "--token", "wrong", SLIPWAY_URL="", SLIPWAY_TOKEN="")
    assert refused.exit_code == 3 and "API tokens" in refused.stderr
    assert "pasted API token" in cli("login", "--help").stdout.replace("\n", " ").replace("  ", " ")


# -- checkpoints, all teams -------------------------------------------------------------------


def injected_checkpoint_url(live_server, token: str, run_id: int) -> str:
    """SLIPWAY_CHECKPOINT_URL as the run's pods get it (from the run's manifest)."""
    manifest = httpx.get(f"{live_server.url}/api/v1/runs/{run_id}/manifest/",
                         headers={"Authorization": f"Bearer {token}"}).json()
    found = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("name") == "SLIPWAY_CHECKPOINT_URL":
                found.append(node["value"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(manifest)
    assert found, "no SLIPWAY_CHECKPOINT_URL in the manifest"
    return found[0]


def test_checkpoint_from_inside_a_run_with_its_token(cli, env, tmp_path, settings, live_server):
    settings.SLIPWAY_POD_API_URL = live_server.url
    spec = write(tmp_path / "ckpt.yaml", run_payload(checkpoint={"grace_seconds": 60}))
    run_id = run_id_of(cli("run", "-f", spec).stdout)
    described = cli("describe", str(run_id)).stdout
    assert "Attempt:         1 (up to 2 retries)" in described.splitlines()
    assert "Last checkpoint:" in described and "none reported yet" in described
    # Inside the run's pod: its token and URL, nothing else (no profile, no personal token).
    pod_env = {"SLIPWAY_URL": "", "SLIPWAY_TOKEN": "", "SLIPWAY_RUN_TOKEN": secret_values(f"run:{run_id}")[
        "SLIPWAY_RUN_TOKEN"], "SLIPWAY_CHECKPOINT_URL": injected_checkpoint_url(live_server, env["SLIPWAY_TOKEN"], run_id)}
    inside = cli("checkpoint", "--step", "1200", "--path", "/slipway/checkpoints/step-1200.pt", **pod_env)
    assert inside.exit_code == 0, inside.output
    assert inside.stdout == f"run {run_id}: checkpoint at step 1200 recorded (/slipway/checkpoints/step-1200.pt)\n"
    run = TrainingRun.objects.get(pk=run_id)
    assert (run.last_checkpoint["step"], run.last_checkpoint["path"]) == (1200, "/slipway/checkpoints/step-1200.pt")
    assert "step 1200 at " in cli("describe", str(run_id)).stdout
    # From a laptop, as a member of the run's team.
    assert cli("checkpoint", str(run_id), "--step", "1300", "--path", "/slipway/checkpoints/step-1300.pt").exit_code == 0
    assert json.loads(cli("describe", str(run_id), "-o", "json").stdout)["last_checkpoint"]["step"] == 1300
    # A pod the portal gave no URL: the log line the reconciler reads.
    no_url = cli("checkpoint", "--step", "5", "--path", "/x", **{**pod_env, "SLIPWAY_CHECKPOINT_URL": ""})
    assert no_url.exit_code == 0 and no_url.stdout == "SLIPWAY_CHECKPOINT step=5 path=/x\n"
    assert "SLIPWAY_CHECKPOINT_URL" in no_url.stderr
    # The token dies with the run.
    assert cli("cancel", str(run_id)).exit_code == 0
    dead = cli("checkpoint", "--step", "1400", "--path", "/x", **pod_env)
    assert dead.exit_code == 3 and "the run token was refused" in dead.stderr and "Traceback" not in dead.output
    outside = cli("checkpoint", "--step", "1", "--path", "/x")
    assert outside.exit_code == 2 and "RUN_ID" in outside.stderr
    assert cli("checkpoint", str(run_id), "--step", "-1", "--path", "/x").exit_code == 2


def test_ps_all_teams_is_for_platform_staff(cli, spec, staff, outsider, other_team, live_server):
    from jobs.services import submit_run
    from quotas.demo import seed_team_quotas
    from teams.services import create_api_token

    own = run_id_of(cli("run", "-f", spec).stdout)
    seed_team_quotas(other_team, {"a100-80gb": 4})
    theirs = submit_run(outsider, other_team, {k: v for k, v in run_payload(name="vision-run").items() if k != "team"})
    assert [r["id"] for r in json.loads(cli("ps", "-o", "json").stdout)] == [own]
    refused = cli("ps", "--all-teams")
    assert refused.exit_code == 4 and "Only platform staff list every team's work" in refused.stderr

    _token, staff_token = create_api_token(staff, "ops")
    assert json.loads(cli("ps", "-o", "json", SLIPWAY_TOKEN=staff_token).stdout) == []  # staff are in no team
    every = json.loads(cli("ps", "--all-teams", "-o", "json", SLIPWAY_TOKEN=staff_token).stdout)
    assert [r["id"] for r in every] == [theirs.pk, own]
    check = validator_for(live_server, "/api/v1/runs/{id}/")
    for item in every:
        check.validate(item)
    only_vision = cli("ps", "--all-teams", "--team", "vision", SLIPWAY_TOKEN=staff_token)
    assert [line.split()[0] for line in only_vision.stdout.splitlines()[1:]] == [str(theirs.pk)]
    assert cli("endpoint", "ls", "--all-teams", SLIPWAY_TOKEN=staff_token).exit_code == 0
    bad = httpx.get(f"{live_server.url}/api/v1/runs/?all_teams=maybe", headers={"Authorization": f"Bearer {staff_token}"})
    assert bad.status_code == 400 and "all_teams" in bad.json()["errors"]


# -- endpoints, quota, cost -------------------------------------------------------------------


def test_endpoint_verbs(cli, tmp_path, ep_quota):
    from tests.inference.conftest import endpoint_payload

    spec = write(tmp_path / "endpoint.yaml", {"team": "ml-research", **endpoint_payload()})
    dry = cli("endpoint", "create", "-f", spec, "--dry-run").stdout
    # An endpoint has no end: its total line says what the budget counts to the month's end.
    line = next(line for line in dry.splitlines() if line.startswith("Estimated total:"))
    assert "Decision:" in dry and "no end: " in line and line.endswith("to the month's end")
    created = cli("endpoint", "create", "-f", spec)
    assert created.exit_code == 0, created.output
    endpoint_id = int(created.stdout.split()[1])
    assert str(endpoint_id) in cli("endpoint", "ls").stdout
    assert json.loads(cli("endpoint", "ls", "-o", "json").stdout)[0]["id"] == endpoint_id
    described = cli("endpoint", "describe", str(endpoint_id)).stdout
    assert "Replicas:" in described
    # Its external URL (the gateway's) and the Service's in-cluster address, each on its line.
    name = endpoint_payload()["name"]
    assert "URL:" in described and f"http://127.0.0.1:8002/ml-research/{name}\n" in described
    assert f"Internal URL: http://ep-{endpoint_id}.team-ml-research.svc.cluster.local" in " ".join(described.split())
    assert f"http://127.0.0.1:8002/ml-research/{name}" in cli("endpoint", "ls").stdout
    scaled = cli("endpoint", "scale", str(endpoint_id), "--max", "2")
    assert scaled.exit_code == 0, scaled.output
    assert "max 2" in scaled.stdout
    assert cli("endpoint", "scale", str(endpoint_id)).exit_code == 2
    deleted = cli("endpoint", "delete", str(endpoint_id))
    assert deleted.exit_code == 0, deleted.output
    # A spec the API refuses is a usage error (2), as for runs.
    refused = write(tmp_path / "refused.yaml", {"team": "ml-research", **endpoint_payload(min_replicas=3, max_replicas=2)})
    assert cli("endpoint", "create", "-f", refused).exit_code == 2


def test_quota_and_cost(cli, spec):
    quota = cli("quota")
    assert quota.exit_code == 0, quota.output
    assert "a100-80gb" in quota.stdout and "Budget:" in quota.stdout
    cost = cli("cost", "--month", timezone.now().strftime("%Y-%m"))
    assert cost.exit_code == 0, cost.output
    assert cost.stdout.splitlines()[-1].startswith("Total:")
    assert cli("cost", "-o", "json").exit_code == 0


def test_cost_names_each_workload_and_its_team_never_a_bare_ref(cli, spec, fake_backend):
    """Issue 34.7: `slipway cost` printed ``run:12`` and no team; each row now says what every message says."""
    run_id = run_id_of(cli("run", "-f", spec).stdout)
    apply_workload("run", run_id)
    run = TrainingRun.objects.get(pk=run_id)
    an_hour_ago = (timezone.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    fake_backend.set_running(run.namespace, run.object_name, 2, started=an_hour_ago)
    reconcile(fake_backend)  # an hour of two GPUs on the ledger
    month = timezone.now().strftime("%Y-%m")

    by_workload = cli("cost", "--month", month)
    assert by_workload.exit_code == 0, by_workload.output
    header, row = by_workload.stdout.splitlines()[:2]
    assert header.split()[0] == "WORKLOAD"
    assert row.startswith(f"run bert-finetune (#{run_id}) of team ml-research ")
    assert f"run:{run_id}" not in by_workload.stdout
    # JSON keeps the machine fields (the ref in ``group``) and adds the words.
    [item] = json.loads(cli("cost", "--month", month, "-o", "json").stdout)
    assert (item["group"], item["label"]) == (f"run:{run_id}", f"run bert-finetune (#{run_id}) of team ml-research")

    # Days, flavors and people sum teams' work: the table says whose.
    by_flavor = cli("cost", "--month", month, "--by", "flavor").stdout.splitlines()
    assert by_flavor[0] == f"Team ml-research, {month}" and by_flavor[1].split()[0] == "FLAVOR"
    assert cli("cost", "--month", month, "--by", "day", "--team", "ml-research").stdout.startswith(
        f"Team ml-research, {month}\n")
    # By workload kind: one row per kind (its noun), its idle cost apart.
    by_kind = cli("cost", "--month", month, "--by", "kind").stdout.splitlines()
    assert by_kind[0] == f"Team ml-research, {month}" and by_kind[1].split()[0] == "KIND"
    assert by_kind[2].split()[0] == "run" and by_kind[3].startswith("Total:")


# -- the Python client ------------------------------------------------------------------------


def test_the_client_iterates_pages_and_maps_401(env, spec, live_server):
    with Client(env["SLIPWAY_URL"], env["SLIPWAY_TOKEN"]) as client:
        for n in range(3):
            client.submit_run(run_payload(name=f"run-{n}"))
        assert [r["name"] for r in client.runs(page_size=1)] == ["run-2", "run-1", "run-0"]
        assert "a100-80gb" in {flavor["name"] for flavor in client.flavors()}
    with Client(env["SLIPWAY_URL"], None) as anonymous, pytest.raises(NotSignedIn, match="slipway login"):
        anonymous.teams()


def test_reads_are_retried_and_writes_are_not():
    calls = []

    def flaky(request):
        calls.append(request.method)
        if len(calls) == 1:
            raise httpx.ConnectError("refused")
        return httpx.Response(200, json={"count": 0, "next": None, "previous": None, "results": []})

    client = Client("http://slipway.invalid", "t", transport=httpx.MockTransport(flaky), backoff=(0, 0))
    assert client.teams() == []
    assert calls == ["GET", "GET"]
    calls.clear()
    with pytest.raises(Exception, match="cannot reach"):
        client.submit_run({})
    assert calls == ["POST"]


def test_the_device_poll_waits_the_interval_slows_down_and_stops_on_a_refusal():
    """RFC 8628 §3.5 on the client side: ``authorization_pending`` waits the interval again, ``slow_down``
    5 s more from then on, a token ends it, ``access_denied`` raises with its code."""
    answers = iter([(400, "authorization_pending"), (400, "slow_down"), (400, "authorization_pending"),
                    (200, None), (400, "access_denied")])

    def server(request):
        assert json.loads(request.content) == {"grant_type": DEVICE_GRANT_TYPE, "device_code": "dc"}
        status, error = next(answers)
        if error is None:
            return httpx.Response(200, json={"access_token": "slp_x", "token_type": "Bearer", "expires_in": None})
        return httpx.Response(status, json={"error": error, "error_description": f"{error}!",
                                            "errors": {"detail": [f"{error}!"]}})

    waits = []
    client = Client("http://slipway.invalid", None, transport=httpx.MockTransport(server))
    grant = {"device_code": "dc", "interval": 2}
    assert client.wait_for_device_token(grant, wait=waits.append)["access_token"] == "slp_x"
    assert waits == [2, 2, 7, 7]
    with pytest.raises(DeviceLoginFailed, match="access_denied!") as refused:
        client.wait_for_device_token(grant, wait=waits.append)
    assert refused.value.code == "access_denied"


def test_the_config_file_is_under_xdg_config_home_else_dot_config(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert config.config_path() == tmp_path / ".config" / "slipway" / "config.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config.config_path() == tmp_path / "xdg" / "slipway" / "config.toml"


def test_borrowing_is_said_before_submit_and_a_preemption_in_describe(cli, tmp_path, team, staff, fake_backend):
    from django.utils import timezone

    from jobs.services import submit_run
    from quotas import services as quota_services
    from quotas.demo import seed_team_quotas
    from teams.models import Role
    from tests.factories import add_member, make_team, make_user
    from workloads.cycle import preemption

    vision = make_team("vision")
    seed_team_quotas(vision, {"a100-80gb": 4})
    quota_services.set_cohort(staff, "research", teams=[team, vision], min_runtime_minutes=0,
                              preemption_delay_seconds=0)
    assert cli("run", "-f", write(tmp_path / "own.yaml", run_payload(name="own", gpus_per_worker=8))).exit_code == 0
    borrowing = write(tmp_path / "borrow.yaml", run_payload(name="extra", gpus_per_worker=4))
    dry = cli("run", "-f", borrowing, "--dry-run")
    assert "Borrows:" in dry.stdout and "4 from the cohort, preemptible" in dry.stdout
    run_id = run_id_of(cli("run", "-f", borrowing).stdout)
    assert "Borrowed:" in cli("describe", str(run_id)).stdout

    vera = make_user("vera")
    add_member(vision, vera, Role.MEMBER)
    submit_run(vera, vision, {"name": "mine", "image": "registry.example.com/ml/t:1", "command": ["python", "t.py"],
                              "flavor": "a100-80gb", "gpus_per_worker": 4})
    assert preemption.reclaim(timezone.now()) == [f"run:{run_id}"]
    described = cli("describe", str(run_id)).stdout
    # The reason names who took what; nothing before it says it again ("by vision: … team vision").
    assert "Preemptions:" in described and " preempted: team vision reclaimed 4\u00d7 a100-80gb" in described
    assert "by vision" not in described
