"""``python manage.py migrate`` alone prepares a database a worker can run on.

The migrate is the run's one (``tests/db_template.py`` :func:`migrated_sqlite`): ``manage.py migrate
--noinput`` on an empty SQLite database with the production settings, the file the suite's other
processes that start from a migrated database copy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import db_template

REPO = Path(__file__).resolve().parents[2]


def test_it_creates_the_cache_table_the_reconcile_lock_lives_in(tmp_path):
    database = db_template.migrated_sqlite(tmp_path / "fresh.sqlite3")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    env.update(SLIPWAY_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="portal.settings",
               DATABASE_URL=f"sqlite:///{database}")
    # What the reconcile task does first: take its single-flight lock in the cache.
    lock = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.core.cache import cache;"
                               "from workloads.tasks import RECONCILE_LOCK; print(cache.add(RECONCILE_LOCK, 't', 30))"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert lock.returncode == 0, lock.stderr
    assert lock.stdout.strip() == "True"
