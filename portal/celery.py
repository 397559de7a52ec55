"""The Celery application shared by the web, worker and beat processes.

Reliability settings (docs/design.md "Reliability rules"): a task is acknowledged only after it finished
(``task_acks_late``), a task whose worker died is redelivered
(``task_reject_on_worker_lost``), and a worker holds one message at a time
(``worker_prefetch_multiplier=1``), so a killed worker loses at most the task it was on,
and that task runs again. Tasks take primary keys and are safe to run twice.

Logging: Celery leaves logging to Django's ``LOGGING`` (``setup_logging``), so a worker writes
the same lines as the web, as text or JSON (``SLIPWAY_LOG_FORMAT``, :mod:`core.logformat`), at
``LOG_LEVEL`` (the worker's ``--loglevel`` gives way to it).

Prometheus figures (:mod:`core.metrics`): each pool process writes its own into the
directory the settings export, which the worker's main process loads before it forks the pool;
the receivers that forget an ended pool process and serve the pool's figures are
:mod:`core.worker`'s (connected when Django loads the apps).
"""

import logging.config
import os

from celery import Celery
from celery.signals import setup_logging
from django.conf import settings
from kombu import Queue
from kombu.transport import TRANSPORT_ALIASES

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
# make run's broker without Redis: kombu's filesystem transport, its messages written whole (core.broker).
TRANSPORT_ALIASES["filesystem"] = "core.broker:Transport"

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
    # Named queues: cluster writes, the reconcile cycle and notifications do not wait behind each other. A worker
    # takes from its queues in turn (kombu's redis transport rotates them), but each queue is first in, first out:
    # a burst on one (a cycle slower than its period, an event to many slow webhooks) would otherwise hold the
    # `default` queue's beat tasks — the canary rule's, the stdout reader's, which expire after two of their own
    # periods — behind it until they expired unrun (docs/operations.md "A slow boot"). A queue of its own does not
    # keep a delivery from holding a process, though: `notify` has workers of its own, and the others consume the
    # rest (scripts/run.sh, deploy/worker.yaml and deploy/notify-worker.yaml, docker-compose.yml).
    task_default_queue="default",
    task_queues=(Queue("default"), Queue("cluster"), Queue("reconcile"), Queue("notify")),
    task_routes={
        "workloads.tasks.reconcile": {"queue": "reconcile"},
        "workloads.tasks.reconcile_cluster": {"queue": "reconcile"},
        "workloads.tasks.apply_workload": {"queue": "cluster"},
        "workloads.tasks.delete_workload": {"queue": "cluster"},
        "quotas.tasks.*": {"queue": "cluster"},
        "notifications.tasks.fan_out": {"queue": "notify"},
        "notifications.tasks.deliver": {"queue": "notify"},
    },
    worker_hijack_root_logger=False,
    # Stops within a fraction of a second on the filesystem broker too (make run without Redis): core.worker.
    worker_consumer="core.worker:PromptConsumer",
)
app.autodiscover_tasks()



@setup_logging.connect
def _django_logging(**kwargs) -> None:
    logging.config.dictConfig(settings.LOGGING)

