"""A GPU notebook: one pod of ``gpus`` units until stopped — the smallest workload kind."""

from django.db import models

from workloads.models import Workload, detail_link


class NotebookState(models.TextChoices):
    QUEUED = "queued"
    ADMITTED = "admitted"
    STARTING = "starting"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    STOPPED = "stopped"


class Notebook(Workload):
    KIND_PREFIX = "nb"
    FINAL_STATES = (NotebookState.DONE, NotebookState.FAILED, NotebookState.STOPPED)
    HOLDING_STATES = (NotebookState.ADMITTED, NotebookState.STARTING, NotebookState.RUNNING)
    ACTIVE_STATES = (NotebookState.QUEUED, *HOLDING_STATES)
    STATES = NotebookState
    INITIAL_STATE = NotebookState.QUEUED

    id = models.BigAutoField(primary_key=True)  # the number its refs and API ids carry
    workload = detail_link()

    gpus = models.PositiveIntegerField(default=1)

    @property
    def placement_shape(self) -> tuple[int, int]:
        """One pod of all its units."""
        return self.gpus, self.gpus
