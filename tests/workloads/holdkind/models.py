"""A block: ``units`` of a flavor held from ``starts_at`` for ``minutes`` — no pods, no cluster objects."""

from datetime import datetime, timedelta

from django.db import models

from workloads.models import Workload, detail_link


class BlockState(models.TextChoices):
    QUEUED = "queued"
    ADMITTED = "admitted"
    BOOKED = "booked"  #: placed; its window is not open yet
    HELD = "held"  #: its window is open: its units are in use, and billed
    DONE = "done"  #: its window closed
    FAILED = "failed"
    ENDED = "ended"  #: ended early by a user (or the budget's stop policy)


class UnitBlock(Workload):
    KIND_PREFIX = "blk"
    FINAL_STATES = (BlockState.DONE, BlockState.FAILED, BlockState.ENDED)
    HOLDING_STATES = (BlockState.ADMITTED, BlockState.BOOKED, BlockState.HELD)
    ACTIVE_STATES = (BlockState.QUEUED, *HOLDING_STATES)
    STATES = BlockState
    INITIAL_STATE = BlockState.QUEUED

    id = models.BigAutoField(primary_key=True)  # the number its refs and API ids carry
    workload = detail_link()

    units = models.PositiveIntegerField(default=1)
    starts_at = models.DateTimeField()
    minutes = models.PositiveIntegerField()

    @property
    def placement_shape(self) -> tuple[int, int]:
        """Its units, one per "worker": no pod needs several on one node, since there are no pods."""
        return self.units, 1

    @property
    def ends_at(self) -> datetime:
        return self.starts_at + timedelta(minutes=self.minutes)
