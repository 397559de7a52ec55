"""``python manage.py migrate`` alone prepares a database a worker can run on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=180)


def test_it_creates_the_cache_table_the_reconcile_lock_lives_in(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    env.update(SLIPWAY_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="portal.settings",
               DATABASE_URL=f"sqlite:///{tmp_path / 'fresh.sqlite3'}")
    migrated = run(["manage.py", "migrate", "--noinput"], env)
    assert migrated.returncode == 0, migrated.stderr
    # What the reconcile task does first: take its single-flight lock in the cache.
    lock = run(["-c", "import django; django.setup(); from django.core.cache import cache;"
                      "from workloads.tasks import RECONCILE_LOCK; print(cache.add(RECONCILE_LOCK, 't', 30))"], env)
    assert lock.returncode == 0, lock.stderr
    assert lock.stdout.strip() == "True"
