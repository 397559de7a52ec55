"""The one priority vocabulary of every workload kind (:class:`Priority`).

Here, below every app that stores it: billing's quota holds, capacity's queue and the workloads
all keep a priority, and admission orders by it.
"""

from __future__ import annotations

from django.db import models


class Priority(models.TextChoices):
    """The one priority vocabulary of every workload kind; it orders a team's queue.

    Stored on queue entries and holds as its :attr:`rank` (higher is admitted first),
    so the queue sorts by an integer column.
    """

    LOW = "low", "Low"
    NORMAL = "normal", "Normal"
    HIGH = "high", "High"

    @property
    def rank(self) -> int:
        return list(Priority).index(self)

    @classmethod
    def from_rank(cls, rank: int) -> Priority:
        return list(cls)[rank]

    @classmethod
    def rank_choices(cls) -> list[tuple[int, str]]:
        return [(p.rank, p.value) for p in cls]
