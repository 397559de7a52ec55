"""``slipway sweep``: create (``--dry-run``: the shape, the rungs and the cost range, nothing created), ls, watch
until the sweep ends, best, stop, delete and a bad file's field errors — against a live server, the sweep driven
between the watch's polls by its driver (:func:`sweeps.driver.advance`) as beat would."""

from __future__ import annotations

import io
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from django.utils import timezone
from rich.console import Console

from fleet.models import Cluster
from jobs import metrics
from jobs.constants import RunState
from jobs.metric_lines import Point
from jobs.models import RunLogCursor, TrainingRun
from slipway import polling
from slipway import sweeps as sweeps_cli
from sweeps import driver
from sweeps.constants import SweepState
from sweeps.models import Study, Sweep
from tests.sweeps.support import matrix_sweep

pytestmark = pytest.mark.django_db(transaction=True)

ASHA = {"type": "asha", "min_resource": 1, "reduction_factor": 3, "max_resource": 27}


def sweep_file(tmp_path, **changes) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"team": "ml-research", **matrix_sweep("lr"), **changes}, sort_keys=False))
    return str(path)


def created_id(output: str) -> int:
    """``sweep 7 lr: running, 2 trials, 1 at a time`` → 7."""
    return int(output.split()[1])


def trial_runs(sweep_id: int) -> list[TrainingRun]:
    return list(TrainingRun.objects.filter(workload__trial__sweep_id=sweep_id).order_by("pk"))


def end_active_trials(sweep_id: int, losses: list[float]) -> None:
    """Each unfinished trial's run reports its loss (the next of ``losses``), succeeds and has its log read."""
    now = timezone.now()
    for run in trial_runs(sweep_id):
        if run.is_final:
            continue
        metrics.record(run, [Point(100, "loss", losses.pop(0), now)], [], now)
        ended(run, RunState.SUCCEEDED)


def ended(run: TrainingRun, state: str) -> None:
    """``run`` ended ``state`` now, and the stdout reader read its log once more after (nothing more to read)."""
    now = timezone.now()
    TrainingRun.objects.filter(pk=run.pk).update(state=state, finished_at=now)
    RunLogCursor.objects.update_or_create(run=run, defaults={"read_at": now, "done": True})


def test_a_dry_run_shows_the_shape_the_rungs_and_the_cost_range_and_creates_nothing(cli, tmp_path):
    path = sweep_file(tmp_path, max_trials=27, parallel=3, pruner=ASHA, max_cost="1000")
    shown = cli("sweep", "create", "-f", path, "--dry-run")
    assert shown.exit_code == 0, shown.output
    shape = json.loads(cli("sweep", "create", "-f", path, "--dry-run", "-o", "json").stdout)
    lines = shown.stdout.splitlines()
    assert lines[:4] == ["Trials:          27", "Parallel:        3 at a time", "Sampler:         random",
                         "Pruner:          asha"]
    # ASHA's rungs as a small table: steps → the trials that reach each.
    rungs = lines[lines.index("Rungs:") + 1:lines.index("Rungs:") + 6]
    assert [line.split() for line in rungs] == [["STEPS", "TRIALS", "REACHING", "IT"], ["1", "27"], ["3", "9"],
                                                ["9", "3"], ["27", "1"]]
    trial, cost = shape["trial"], shape["cost"]
    assert f"First trial:     admit ({trial['message']})" in lines and "Estimated start: now" in lines
    assert f"Price:           {Decimal(trial['price_per_hour']):.2f} USD/h a unit" in lines
    assert f"Whole trial:     {trial['cost']} USD, {trial['gpu_hours']} GPU-hours (to its runtime limit)" in lines
    assert any(line.startswith(f"Cost:            {cost['low']}\u2013{cost['high']} USD (low: as ASHA's rungs")
               for line in lines)
    assert f"GPU-hours:       {shape['gpu_hours']['low']}\u2013{shape['gpu_hours']['high']}" in lines
    assert "Cap:             1,000.00 USD: all 27 trials within it" in lines
    whole = Decimal(trial["cost"])
    capped = cli("sweep", "create", "-f", sweep_file(tmp_path, max_cost=str(whole * 3 / 2), max_trials=5), "--dry-run")
    assert f"Cap:             {whole * 3 / 2:.2f} USD: 1 of 5 whole trials within it" in capped.stdout.splitlines()
    assert "Rungs:" not in capped.stdout  # no ASHA, no rungs
    uncapped = cli("sweep", "create", "-f", sweep_file(tmp_path), "--dry-run").stdout.splitlines()
    assert "Cap:             none (the file sets no max_cost or max_gpu_hours)" in uncapped
    assert any(line.startswith("Cost:") and line.endswith("(low: no pruning: every trial to its limit; high: every "
                                                          "trial to its runtime limit)") for line in uncapped)
    assert not Sweep.objects.exists() and not Study.objects.exists()


def test_a_bad_file_says_each_field_with_its_line_and_exits_2(cli, tmp_path):
    path = sweep_file(tmp_path, run={**matrix_sweep()["run"], "image": "not an image!"})
    refused = cli("sweep", "create", "-f", path)
    assert refused.exit_code == 2
    image_line = next(n for n, line in enumerate(Path(path).read_text().splitlines(), 1) if line.strip().startswith("image:"))
    assert f"{path}, line {image_line}: run.image: " in refused.output
    assert cli("sweep", "create", "-f", sweep_file(tmp_path, max_trials=0), "--dry-run").exit_code == 2
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: lr\nparameters: [lr\n")
    unreadable = cli("sweep", "create", "-f", str(broken))
    assert unreadable.exit_code == 2 and f"{broken}, line 3" in unreadable.output
    assert not Sweep.objects.exists()


@pytest.mark.parametrize(("line", "said"), [
    ("max_cost: 2024-01-01", "line {n}, column 11: 2024-01-01 is a date or a time, which JSON has no value for: quote it"),
    ("max_cost: .nan", "line {n}, column 11: .nan is not a number JSON has (no NaN or infinity)"),
    ("max_cost: !!binary aGVsbG8=", "line {n}, column 11: !!binary is bytes, which JSON has no value for"),
    ("max_cost: [5", "line {after}, column 1: while parsing a flow sequence, expected ',' or ']'"),
    ("2024: 5", "line {n}, column 1: the key 2024 is not text, and JSON's keys are: quote it"),
])
def test_a_file_yaml_reads_into_values_json_has_not_is_refused_with_its_line(cli, tmp_path, line, said):
    """An unquoted date, ``.nan``, ``!!binary``, a broken flow or a number as a key: said with the file and the line,
    exit 2, no traceback (the runner re-raises one), nothing sent, nothing created."""
    path = Path(sweep_file(tmp_path))
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines, line]) + "\n")
    said = said.format(n=len(lines) + 1, after=len(lines) + 2)  # the case's line, and the end after it
    for dry_run in ((), ("--dry-run",)):
        refused = cli("sweep", "create", "-f", str(path), *dry_run)
        assert refused.exit_code == 2
        assert refused.stderr.startswith(f"Error: {path}, {said}"), refused.stderr
    assert not Sweep.objects.exists() and not Study.objects.exists()


def test_a_file_that_is_no_mapping_or_no_text_is_refused_with_its_name(cli, tmp_path):
    for name, content, said in [("list.yaml", "- lr\n- batch\n", "not a list"), ("empty.yaml", "", "not nothing"),
                                ("text.yaml", "lr-search\n", "not text")]:
        path = tmp_path / name
        path.write_text(content)
        refused = cli("sweep", "create", "-f", str(path))
        assert refused.exit_code == 2
        assert refused.stderr.startswith(f"Error: {path}: expected the API's fields as a mapping"), refused.stderr
        assert said in refused.stderr
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"name: \xff\xfe\n")
    refused = cli("sweep", "create", "-f", str(binary))
    assert refused.exit_code == 2 and refused.stderr.startswith(f"Error: {binary}: not UTF-8 text")
    assert not Sweep.objects.exists()


def test_a_json_file_is_read_by_jsons_rules(cli, tmp_path):
    """JSON with tabs and an exponent (YAML refuses the one and reads the other as text) is read as JSON is."""
    spec = {"team": "ml-research", **matrix_sweep("lr")}
    spec["parameters"]["lr"].update(min=1e-4, max=1e-2)
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(spec, indent="\t").replace("0.0001", "1e-4"))
    assert "\t" in path.read_text() and "1e-4" in path.read_text()
    shown = cli("sweep", "create", "-f", str(path), "--dry-run")
    assert shown.exit_code == 0, shown.output
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps({**spec, "max_cost": float("nan")}))
    refused = cli("sweep", "create", "-f", str(nan), "--dry-run")
    assert refused.exit_code == 2 and refused.stderr.startswith(f"Error: {nan}: NaN is not a number JSON has")


def test_it_creates_lists_watches_to_the_end_shows_the_best_and_deletes(cli, tmp_path, monkeypatch):
    path = sweep_file(tmp_path)
    teamless = yaml.safe_load(Path(path).read_text())
    del teamless["team"]
    (tmp_path / "sweep.json").write_text(json.dumps(teamless))
    created = cli("sweep", "create", "-f", str(tmp_path / "sweep.json"), "--team", "ml-research")
    assert created.exit_code == 0, created.output
    sweep_id = created_id(created.stdout)
    assert created.stdout.splitlines() == [f"sweep {sweep_id} lr: running, 2 trials, 1 at a time",
                                           f"Watch it: slipway sweep watch {sweep_id}"]
    listed = cli("sweep", "ls", "--team", "ml-research", "--state", "running").stdout.splitlines()
    assert listed[0].split() == ["ID", "TEAM", "NAME", "STATE", "OBJECTIVE", "TRIALS", "BY", "CREATED"]
    assert listed[1].split()[:8] == [str(sweep_id), "ml-research", "lr", "running", "minimize", "loss", "2", "mia"]
    assert len(cli("sweeps", "ls", "--state", "completed").stdout.splitlines()) == 1  # the header alone

    none_yet = cli("sweep", "best", str(sweep_id))
    assert none_yet.exit_code == 1
    assert f"sweep {sweep_id} lr has no best trial yet: none of its trials completed with a value of loss" in none_yet.output

    losses = [0.5, 0.25]
    polls = []

    def the_driver_acts(seconds):
        polls.append(seconds)
        end_active_trials(sweep_id, losses)
        driver.advance(sweep_id)

    monkeypatch.setattr(polling, "pause", the_driver_acts)
    watched = cli("sweep", "watch", str(sweep_id))
    assert watched.exit_code == 0, watched.output
    # Launched, t001 ended and t002 launched, t002 ended and the sweep completed: three acts, then the final poll.
    assert len(polls) == 3 and losses == []
    blocks = watched.stdout.split("\n\n")
    assert blocks[0].splitlines()[0].startswith(f"sweep {sweep_id} lr: running; no trials yet; no best trial yet; "
                                                "spent 0.00 USD + committed 0.00 USD, no cap")
    assert "lr-t001  active (" in blocks[1]
    last = blocks[-1].splitlines()
    assert last[0].startswith(f"sweep {sweep_id} lr: completed; 2 completed; best lr-t002 loss 0.25; spent ")
    assert last[1].split() == ["#", "NAME", "STATE", "PARAMS", "STEP", "OBJECTIVE", "BEST", "COST"]
    body = cli("sweep", "best", str(sweep_id), "-o", "json")
    best = json.loads(body.stdout)
    first, second = (line.split() for line in last[2:4])
    assert first[:3] == ["1", "lr-t001", "completed"] and first[4:7] == ["100", "0.5", "0.5"]
    assert second[:3] == ["2", "lr-t002", "completed"] and second[3] == f"lr={best['params']['lr']:.4g}"
    assert second[-2:] == ["0.00", "USD"]  # admitted on the fake cluster, never started: nothing spent

    shown = cli("sweep", "best", str(sweep_id))
    assert shown.exit_code == 0, shown.output
    run = trial_runs(sweep_id)[1]
    assert shown.stdout.splitlines() == ["Trial: 2 lr-t002", "Value: loss 0.25 (minimize)",
                                         f"Run:   {run.pk} (slipway describe {run.pk})", "Parameters:",
                                         f"  lr={best['params']['lr']}"]
    assert best["run_id"] == run.pk and best["name"] == "lr-t002"

    finished = cli("sweep", "stop", str(sweep_id))
    assert finished.exit_code == 1 and "Error: The sweep is completed: there is nothing to stop." in finished.output
    deleted = cli("sweep", "delete", str(sweep_id))
    assert deleted.exit_code == 0 and deleted.stdout.strip() == f"sweep {sweep_id} deleted; its trials' runs stay the team's"
    assert not Sweep.objects.exists() and len(TrainingRun.objects.filter(name__startswith="lr-t")) == 2
    assert cli("sweep", "watch", str(sweep_id)).exit_code == 4


def test_stop_says_stopping_then_a_second_stop_and_a_live_delete_are_refused(cli, tmp_path, monkeypatch):
    sweep_id = created_id(cli("sweep", "create", "-f", sweep_file(tmp_path)).stdout)
    driver.advance(sweep_id)  # its first trial launches
    stopped = cli("sweep", "stop", str(sweep_id))
    assert stopped.exit_code == 0, stopped.output
    assert stopped.stdout.strip() == (f"sweep {sweep_id} lr: stopping (stopped by mia); its active trials save a "
                                      "checkpoint and stop")
    again = cli("sweep", "stop", str(sweep_id))
    assert again.exit_code == 1 and "Error: The sweep is stopping: there is nothing to stop." in again.output
    live = cli("sweep", "delete", str(sweep_id))
    assert live.exit_code == 1 and "Error: The sweep is still live: stop it first." in live.output

    def stopped_trials_end(_seconds):
        for run in trial_runs(sweep_id):  # its pods saved their checkpoint and stopped
            ended(run, RunState.CANCELLED)
        driver.advance(sweep_id)

    monkeypatch.setattr(polling, "pause", stopped_trials_end)
    # On a terminal the header and the table are refreshed in place (Rich's live display), its last frame kept.
    screen = io.StringIO()
    monkeypatch.setattr(sweeps_cli, "console", lambda: Console(file=screen, force_terminal=True, width=120))
    watched = cli("sweep", "watch", str(sweep_id))
    # Ended by a user with no completed trial: no best, exit 1.
    assert watched.exit_code == 1 and watched.stdout == ""
    frames = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    assert "lr: stopping; 1 active" in frames and "active (" in frames
    last = frames[frames.rindex(f"sweep {sweep_id} lr:"):].splitlines()
    assert last[0].startswith(f"sweep {sweep_id} lr: stopped; 1 stopped; no best trial yet") and last[1] == "stopped by mia"
    assert last[3].split()[:3] == ["1", "lr-t001", "stopped"]
    assert Sweep.objects.get(pk=sweep_id).state == SweepState.STOPPED
    assert cli("sweep", "delete", str(sweep_id)).exit_code == 0
    assert cli("sweep", "stop", "999999").exit_code == 4


def test_continue_goes_on_from_a_pruned_trials_checkpoint_and_a_second_continue_is_refused(cli, tmp_path):
    path = sweep_file(tmp_path, run={**matrix_sweep()["run"], "checkpoint": {"grace_seconds": 30}})
    sweep_id = created_id(cli("sweep", "create", "-f", path).stdout)
    driver.advance(sweep_id)  # its first trial launches
    run = trial_runs(sweep_id)[0]
    # Pruned where it ran, with a checkpoint reported, and told to the study as pruned.
    TrainingRun.objects.filter(pk=run.pk).update(cluster=Cluster.objects.get_or_create(name="east")[0], last_checkpoint_step=100,
                                                 last_checkpoint_path="/slipway/checkpoints/step-100",
                                                 last_checkpoint_at=timezone.now())
    ended(run, RunState.PRUNED)
    driver.advance(sweep_id)
    assert Sweep.objects.get(pk=sweep_id).trials.get(number=1).state == "pruned"

    running = cli("sweep", "continue", str(sweep_id), "2")
    assert running.exit_code == 1 and "Error: Trial 2 is active: only a pruned trial can be continued." in running.output
    went_on = cli("sweep", "continue", str(sweep_id), "1")
    assert went_on.exit_code == 0, went_on.output
    resumed = TrainingRun.objects.get(resumes=run)
    assert went_on.stdout.strip() == (f"sweep {sweep_id}: trial 1 continued as trial 3 lr-t003, run {resumed.pk} "
                                      f"(slipway describe {resumed.pk})")
    assert resumed.last_checkpoint_path == "/slipway/checkpoints/step-100"
    assert resumed.cluster.name == "east"  # where the checkpoint is
    again = cli("sweep", "continue", str(sweep_id), "1")
    assert again.exit_code == 1 and "Error: Trial 1 was continued already, as trial 3." in again.output
