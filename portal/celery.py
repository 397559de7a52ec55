"""The Celery application shared by the web, worker and beat processes.

Reliability settings (DESIGN.md §6): a task is acknowledged only after it finished
(``task_acks_late``), a task whose worker died is redelivered
(``task_reject_on_worker_lost``), and a worker holds one message at a time
(``worker_prefetch_multiplier=1``), so a killed worker loses at most the task it was on,
and that task runs again. Tasks take primary keys and are safe to run twice.

Logging: Celery leaves logging to Django's ``LOGGING`` (``setup_logging``), so a worker writes
the same lines as the web, as text or JSON (``SLIPWAY_LOG_FORMAT``, :mod:`core.logformat`).

Prometheus figures (:mod:`core.metrics`): each pool process writes its own into the
directory the settings export, which the worker's main process loads before it forks the pool;
a pool process that ends has its live gauges forgotten (``worker_process_shutdown``). With
``SLIPWAY_WORKER_METRICS_PORT`` set, the main process serves them on that port.
"""

import logging.config
import os
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

from celery import Celery
from celery.signals import setup_logging, worker_process_shutdown, worker_ready
from django.conf import settings
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("slipway")
app.config_from_object("django.conf:settings", namespace="CELERY")

app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    # Publishing must not hang a web request when the broker is down: fail fast, the
    # reconciler re-drives admitted work that never reached the cluster.
    broker_connection_timeout=2,
    task_publish_retry=False,
    # Named queues: cluster writes and the reconcile cycle do not wait behind each other.
    task_default_queue="default",
    task_queues=(Queue("default"), Queue("cluster"), Queue("reconcile")),
    task_routes={
        "workloads.tasks.reconcile": {"queue": "reconcile"},
        "workloads.tasks.apply_workload": {"queue": "cluster"},
        "workloads.tasks.delete_workload": {"queue": "cluster"},
        "quotas.tasks.*": {"queue": "cluster"},
    },
    worker_hijack_root_logger=False,
)
app.autodiscover_tasks()



@setup_logging.connect
def _django_logging(**kwargs) -> None:
    logging.config.dictConfig(settings.LOGGING)


@worker_process_shutdown.connect
def _forget_process(pid: int | None = None, **kwargs) -> None:
    # Imported here, not at the top: this module is imported with the portal package, before
    # the settings ran, and prometheus_client must not be imported before they exported the
    # figures' directory (core.metrics).
    from core.metrics import process_exited

    process_exited(pid or os.getpid())


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:
        """Scrapes are not worth a log line each."""


@worker_ready.connect
def _serve_metrics(**kwargs) -> None:
    if not settings.SLIPWAY_WORKER_METRICS_PORT:
        return
    from core.metrics import worker_endpoint  # not at the top: see _forget_process

    server = make_server("", settings.SLIPWAY_WORKER_METRICS_PORT, worker_endpoint, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="slipway-metrics", daemon=True).start()
