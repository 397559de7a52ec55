"""One cluster for every process: state lives in the database, not in a process.

The test drives separate ``manage.py`` processes against one on-disk SQLite database (its own
throw-away file, so it works with the in-memory test database too): one applies, one ticks,
one prints the status — as web, beat and an admin's shell would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests import db_template

ROOT = Path(__file__).resolve().parents[2]

APPLY = """
from cluster.manifests import build_team
from jobs.manifests import build_training
from cluster.specs import ClusterConfig, FlavorSpec, TeamSpec
from jobs.specs import TrainingSpec
from sandbox.backend import SandboxBackend
from workloads.registry import resource_kinds
flavor = FlavorSpec(name="h100", resource_name="nvidia.com/gpu", gpu_model="NVIDIA-H100-80GB-HBM3")
spec = TrainingSpec(object_name="run-7", team="ml", namespace="team-ml", name="x", image="img:1",
                    command=("python", "train.py"), flavor=flavor, gpus_per_worker=3,
                    env=(("SLIPWAY_SIM_DURATION", "1h"),))
SandboxBackend().apply(build_team(TeamSpec(slug="ml", namespace="team-ml"), ClusterConfig())
                       + build_training(spec, ClusterConfig()), resource_kinds())
print("applied")
"""


def _manage(db: Path, *args: str) -> str:
    env = dict(os.environ, DATABASE_URL=f"sqlite:///{db}", SLIPWAY_VAR_DIR=str(db.parent),
               DJANGO_SETTINGS_MODULE="portal.settings", SLIPWAY_SANDBOX_INVENTORY=settings.SLIPWAY_SANDBOX_INVENTORY)
    env.pop("SLIPWAY_TEST_DB_NAME", None)
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_it_shares_one_cluster_across_processes(tmp_path):
    db = db_template.migrated_sqlite(tmp_path / "sandbox.sqlite3")  # the run's migrated file (tests/db_template.py)
    assert "applied" in _manage(db, "shell", "-c", APPLY)
    _manage(db, "sandbox", "tick", "--at", "2026-11-22T10:00:00Z")
    _manage(db, "sandbox", "tick", "--at", "2026-11-22T10:00:30Z")
    status = _manage(db, "sandbox", "status")
    h100 = [line.split() for line in status.splitlines() if line.startswith("gpu-h100-0 ")]
    assert h100 == [["gpu-h100-0", "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu", "3", "5", "8"]]
    assert "total nvidia.com/gpu: 3 used, 29 free of 32" in status
    assert "Sandbox cluster default at 2026-11-22T10:00:30Z" in status
    assert "team-ml/run-7-" in status and "Running" in status


def _database_url() -> str | None:
    """A URL other processes can use to reach this test database (None: in-memory SQLite)."""
    from urllib.parse import quote

    from django.db import connection

    db = connection.settings_dict
    if "sqlite" in db["ENGINE"]:
        name = str(db["NAME"])
        return None if name == ":memory:" or "mode=memory" in name else f"sqlite:///{name}"
    auth = quote(db["USER"] or "") + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.mark.slow
def test_it_shows_what_this_process_applied_to_another_process(transactional_db):
    """Apply here, read it in a subprocess: needs a test DB other processes can open (PostgreSQL, or
    SQLite with SLIPWAY_TEST_DB_NAME set to a file path)."""
    from tests.sandbox.helpers import H100, at, team_objects, training

    url = _database_url()
    if url is None:
        pytest.skip("in-memory SQLite test DB: set SLIPWAY_TEST_DB_NAME to a file path or use PostgreSQL")
    from sandbox.backend import SandboxBackend
    from workloads.registry import resource_kinds

    backend = SandboxBackend()
    backend.apply(team_objects() + training("run-9", flavor=H100, gpus=5, duration="1h"), resource_kinds(), now=at(0))
    backend.tick(at(0))
    env = dict(os.environ, DATABASE_URL=url, DJANGO_SETTINGS_MODULE="portal.settings",
               SLIPWAY_SANDBOX_INVENTORY=settings.SLIPWAY_SANDBOX_INVENTORY)
    result = subprocess.run([sys.executable, "manage.py", "sandbox", "status"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "total nvidia.com/gpu: 5 used, 27 free of 32" in result.stdout
