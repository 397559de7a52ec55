"""gunicorn settings every launch of the web server shares (Dockerfile, deploy/web.yaml,
docker-compose.yml, scripts/run.sh pass ``--config gunicorn.conf.py``; gunicorn also reads
this file by default from the working directory).

gunicorn answers a request line over ``limit_request_line`` bytes itself, with a 414 and an
HTML body, before Django (and the API's JSON error shape) runs. Its default, 4094, is short
enough that a long list of query parameters could reach it; 8190 is gunicorn's maximum and
twice what any API URL needs (docs/operations.md, "Request size limits"). Bodies are limited by
Django (``DATA_UPLOAD_MAX_MEMORY_SIZE``, a 413 in the JSON error shape under ``/api/``).

Prometheus figures (``/metrics``, :mod:`core.metrics`): every worker writes its own into
``PROMETHEUS_MULTIPROC_DIR``, which the settings export. The master loads the settings before it
forks (``on_starting``), so each worker inherits the directory, and ``child_exit`` forgets a
dead worker's live gauges there (docs/operations.md, "Monitoring").
"""

import os

from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

limit_request_line = 8190


def on_starting(server) -> None:
    # Reading a setting loads portal/settings.py in the master, which exports the directory.
    server.log.info("Prometheus figures in %s", settings.PROMETHEUS_MULTIPROC_DIR)


def post_worker_init(worker) -> None:
    # The worker has loaded Django and every app: keep that heap out of the garbage collector's passes,
    # the exit's last one too, so a Ctrl-C on `make run` does not wait for it (core.worker.freeze_startup_heap).
    from core.worker import freeze_startup_heap
    freeze_startup_heap()


def child_exit(server, worker) -> None:
    # Imported here, not at the top: prometheus_client chooses its multiprocess mode when first
    # imported, so the master must not import it before on_starting exported the directory.
    from core.metrics import process_exited

    process_exited(worker.pid)
