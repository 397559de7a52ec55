"""The Celery worker's share of ``/metrics`` (:mod:`core.metrics`): receivers of Celery's signals.

Connected when Django loads the apps (:class:`core.apps.CoreConfig`), which a worker does at
start-up, before it forks its pool and before ``prometheus_client`` is first imported:

* a pool process that ends has its live gauges forgotten (``worker_process_shutdown``), as
  gunicorn's ``child_exit`` does for a web worker (``gunicorn.conf.py``);
* the heap the worker starts with is frozen (``worker_init``, before the pool forks: :func:`_freeze_startup_heap`);
* with ``SLIPWAY_WORKER_METRICS_PORT`` set, the worker's main process serves its pool's figures
  on that port (``worker_ready``): in Kubernetes each worker pod has its own multiprocess
  directory, which the web's ``/metrics`` cannot read.

It also holds the worker's consumer (:class:`PromptConsumer`, the Celery app's ``worker_consumer``),
which stops promptly on a broker that has no event loop of its own.
"""

from __future__ import annotations

import gc
import os
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

from celery import bootsteps
from celery.signals import beat_init, worker_init, worker_process_shutdown, worker_ready
from celery.worker import loops, state
from celery.worker.consumer import Consumer
from django.conf import settings

from core.metrics import process_exited, worker_endpoint


@worker_process_shutdown.connect(dispatch_uid="slipway-metrics-process-exited")
def _forget_process(pid: int | None = None, **kwargs) -> None:
    process_exited(pid or os.getpid())


@worker_init.connect(dispatch_uid="slipway-freeze-startup-heap")
@beat_init.connect(dispatch_uid="slipway-freeze-startup-heap-beat")
def freeze_startup_heap(**kwargs) -> None:
    """Leave what a process imported at start-up (Django, every app: most of its heap) out of the garbage
    collector's passes: it lives as long as the process. Python's own advice for a server that forks
    (``gc.freeze``): the worker's pool processes' collections no longer touch, and so copy, the pages they
    share with the main process; and a process no longer walks that whole heap once more as it exits,
    which took two of the six seconds ``make run``'s Ctrl-C gives the worker (its main process and its
    pool's) to stop. The worker (before it forks its pool), beat, and each web worker (gunicorn.conf.py)."""
    gc.freeze()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:
        """Scrapes are not worth a log line each."""


@worker_ready.connect(dispatch_uid="slipway-metrics-endpoint")
def _serve_metrics(**kwargs) -> None:
    if not settings.SLIPWAY_WORKER_METRICS_PORT:
        return
    server = make_server("", settings.SLIPWAY_WORKER_METRICS_PORT, worker_endpoint, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="slipway-metrics", daemon=True).start()


#: How long one wait on a broker without an event loop lasts (:func:`prompt_loop`): how late the worker sees
#: a stop request at most, and how late it sees a new task (the filesystem transport polls at this pace).
POLL_SECONDS = 0.25


def prompt_loop(obj, connection, consumer, blueprint, hub, qos, heartbeat, clock, hbrate=2.0, **kwargs) -> None:
    """The worker's blocking loop on a broker without an event loop: the filesystem transport of ``make run``
    without Redis (Redis and AMQP brokers have one, and keep Celery's own loop, ``asynloop``).

    Celery's fallback (``celery.worker.loops.synloop``) waits up to 2 s on the broker at a time and, once a
    stop is asked, still runs one more such wait, taking new tasks in it: a warm shutdown spent up to 4 s
    before it even began to stop the pool, and then waited for the tasks it had just taken. With a
    prefork pool that stops its helper threads in about a second each, ``make run``'s Ctrl-C ran past its
    6 s grace and the worker was killed every time. This loop waits :data:`POLL_SECONDS` at a time and
    looks for a stop request before each wait, so it never takes a task once asked to stop.
    """
    consumer.on_message = obj.create_task_handler()
    consumer.consume()
    obj.on_ready()
    while blueprint.state == bootsteps.RUN and obj.connection:
        state.maybe_shutdown()  # raises WorkerShutdown (warm) or WorkerTerminate (cold) once a stop was asked
        if qos.prev != qos.value:
            qos.update()
        obj.perform_pending_operations()
        try:
            connection.drain_events(timeout=POLL_SECONDS)
        except TimeoutError:  # socket.timeout: nothing came in this wait
            pass
        except OSError:
            if blueprint.state == bootsteps.RUN:
                raise


class PromptConsumer(Consumer):
    """Celery's consumer, with :func:`prompt_loop` where Celery would use its blocking fallback loop."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The green pools (gevent, eventlet) need synloop's heartbeats; Slipway's workers are prefork.
        if self.loop is loops.synloop and not getattr(self.pool, "is_green", False):
            self.loop = prompt_loop
