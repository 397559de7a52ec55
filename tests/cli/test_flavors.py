"""``slipway flavors`` and the dry runs' advice on the command line (issue 37 item 5), against a live server."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

import pytest
import yaml
from django.utils import timezone

from billing.ledger import month_start, record_usage
from jobs.models import TrainingRun
from quotas.demo import seed_team_quotas
from tests.cli.test_cli import list_item_validator, write
from tests.inference.conftest import endpoint_payload
from tests.jobs.conftest import run_payload
from tests.shared_flavors import make_shared_flavors

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def shared(team, quota):
    made = make_shared_flavors()
    seed_team_quotas(team, {"t4-ts4": 4, "a10g-mps2": 2}, Decimal("100000"))
    return made


def test_flavors_prints_sharing_isolation_memory_training_and_the_price_of_a_unit(cli, shared, live_server):
    result = cli("flavors")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["FLAVOR", "GPU", "SHARING", "ISOLATION", "MEMORY/UNIT", "TRAINING", "PRICE/UNIT"]
    rows = {line.split()[0]: line.split() for line in lines[1:-1]}
    assert rows["t4-ts4"] == ["t4-ts4", "Tesla-T4", "time-sliced", "\u00d74", "none", "16", "GB", "shared", "no",
                              "0.10", "USD/h"]
    assert rows["a10g-mps2"] == ["a10g-mps2", "NVIDIA-A10G", "MPS", "\u00d72", "partial", "12", "GB", "own", "yes",
                                 "0.50", "USD/h"]
    assert rows["a100-1g.10gb"][2:8] == ["MIG", "slice", "hardware", "10", "GB", "own"]
    assert rows["a100-80gb"][2:7] == ["whole", "GPU", "exclusive", "80", "GB"]
    assert lines[-1] == f"Which flavor for which work: {live_server.url}/help/flavors/"


def test_flavors_json_and_yaml_are_the_apis_rows(cli, shared, live_server):
    rows = json.loads(cli("flavors", "-o", "json").stdout)
    check = list_item_validator(live_server, "/api/v1/flavors/")
    for row in rows:
        check.validate(row)
    assert {r["name"]: r["sharing"] for r in rows}["t4-ts4"] == "time-slicing"
    assert yaml.safe_load(cli("flavors", "-o", "yaml").stdout) == rows


def test_a_dry_run_prints_the_advice_it_contradicts(cli, shared, tmp_path):
    spec = write(tmp_path / "endpoint.yaml", {"team": "ml-research", **endpoint_payload(flavor="t4-ts4", gpu_memory_gb=70)})
    result = cli("endpoint", "create", "-f", spec, "--dry-run")
    assert result.exit_code == 0, result.output
    assert "Warning: A pod that needs 70 GB of GPU memory on t4-ts4" in result.stdout


def test_a_run_the_shared_flavor_refuses_is_a_usage_error_naming_the_field(cli, shared, tmp_path):
    spec = write(tmp_path / "run.yaml", run_payload(flavor="a10g-mps2", gpus_per_worker=1, workers=2))
    result = cli("run", "-f", spec)
    assert result.exit_code == 2
    assert "workers: a10g-mps2 is an MPS share of one GPU" in result.output
    assert not TrainingRun.objects.exists()


def test_cost_prints_unit_hours_and_physical_gpu_hours_apart(cli, shared, member, team):
    """Four time-sliced ×4 units for an hour: 4 unit-hours, 1 physical GPU-hour (tests/billing/test_physical_gpu_hours.py)."""
    start = month_start()
    record_usage(team, "ep:900", "t4-ts4", member, start, start + timedelta(hours=1), 4, False)
    result = cli("cost", "--by", "flavor", "--month", f"{timezone.localtime(start):%Y-%m}")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.startswith("FLAVOR"))
    assert header.split() == ["FLAVOR", "UNIT-HOURS", "PHYSICAL", "GPU-HOURS", "COST", "IDLE", "COST"]
    assert next(line for line in lines if line.startswith("t4-ts4")).split() == [
        "t4-ts4", "4.0000", "1.0000", "0.40", "USD", "0.00", "USD"]
