"""A GPU notebook: one pod of ``gpus`` units until stopped — the smallest workload kind."""

from django.db import models

from workloads.models import Workload


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

    gpus = models.PositiveIntegerField(default=1)
    state = models.CharField(max_length=16, choices=NotebookState.choices, default=NotebookState.QUEUED)

    @property
    def placement_shape(self) -> tuple[int, int]:
        """One pod of all its units."""
        return self.gpus, self.gpus
