"""gunicorn settings every launch of the web server shares (Dockerfile, deploy/web.yaml,
docker-compose.yml, scripts/run.sh pass ``--config gunicorn.conf.py``; gunicorn also reads
this file by default from the working directory).

gunicorn answers a request line over ``limit_request_line`` bytes itself, with a 414, before
Django runs; and a header it refuses (a value with a control character other than a tab, such
as ``Idempotency-Key: a<0x01>b``; a malformed name; too many or too long headers) with a 400 or
431. It would write those in HTML; ``post_worker_init`` makes them the API's JSON error shape
(security review 5 #9d), whatever the path: it is refused before its path is known, and only
programs send such requests. Its default, 4094, is short
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


def child_exit(server, worker) -> None:
    # Imported here, not at the top: prometheus_client chooses its multiprocess mode when first
    # imported, so the master must not import it before on_starting exported the directory.
    from core.metrics import process_exited

    process_exited(worker.pid)


def post_worker_init(worker) -> None:
    # In the worker, once the application (and so Django) is loaded. First keep that heap out of the garbage
    # collector's passes, the exit's last one too, so a Ctrl-C on `make run` does not wait for it
    # (core.worker.freeze_startup_heap). Then gunicorn's own refusals, written by gunicorn.util.write_error in
    # HTML, go out in portal.errors.api_error's JSON shape instead.
    from gunicorn import util

    from core.worker import freeze_startup_heap
    from portal.errors import api_error

    freeze_startup_heap()

    def write_error(sock, status_int: int, reason: str, mesg: str) -> None:
        body = api_error(status_int, mesg or reason).content
        head = (f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n")
        util.write_nonblock(sock, head.encode("latin-1") + body)

    util.write_error = write_error
