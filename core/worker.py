"""The Celery worker's share of ``/metrics`` (:mod:`core.metrics`): receivers of Celery's signals.

Connected when Django loads the apps (:class:`core.apps.CoreConfig`), which a worker does at
start-up, before it forks its pool and before ``prometheus_client`` is first imported:

* a pool process that ends has its live gauges forgotten (``worker_process_shutdown``), as
  gunicorn's ``child_exit`` does for a web worker (``gunicorn.conf.py``);
* with ``SLIPWAY_WORKER_METRICS_PORT`` set, the worker's main process serves its pool's figures
  on that port (``worker_ready``): in Kubernetes each worker pod has its own multiprocess
  directory, which the web's ``/metrics`` cannot read.
"""

from __future__ import annotations

import os
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

from celery.signals import worker_process_shutdown, worker_ready
from django.conf import settings

from core.metrics import process_exited, worker_endpoint


@worker_process_shutdown.connect(dispatch_uid="slipway-metrics-process-exited")
def _forget_process(pid: int | None = None, **kwargs) -> None:
    process_exited(pid or os.getpid())


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:
        """Scrapes are not worth a log line each."""


@worker_ready.connect(dispatch_uid="slipway-metrics-endpoint")
def _serve_metrics(**kwargs) -> None:
    if not settings.SLIPWAY_WORKER_METRICS_PORT:
        return
    server = make_server("", settings.SLIPWAY_WORKER_METRICS_PORT, worker_endpoint, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="slipway-metrics", daemon=True).start()
