"""One identity per workload: its kind and primary key (docs/glossary.md "ref", "object name").

Everything else is derived from it in one place — the quota/ledger reference (``run:42``)
and the object name and ``slipway.dev/workload`` label (``run-42``) — and parsed back from
either form by splitting at its separator, never by rewriting one string into the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.text import whole_number

REF_SEPARATOR = ":"
NAME_SEPARATOR = "-"


@dataclass(frozen=True, order=True)
class WorkloadId:
    """``prefix`` names the kind (``run``, ``ep``); ``pk`` the row of that kind's model."""

    prefix: str
    pk: int

    @property
    def ref(self) -> str:
        """The reference quotas and the ledger know the workload by, e.g. ``run:42``."""
        return f"{self.prefix}{REF_SEPARATOR}{self.pk}"

    @property
    def object_name(self) -> str:
        """The name of its cluster objects and its workload label, e.g. ``run-42`` (DNS-1123)."""
        return f"{self.prefix}{NAME_SEPARATOR}{self.pk}"

    @classmethod
    def from_ref(cls, ref: str) -> WorkloadId | None:
        return cls._parse(ref, REF_SEPARATOR)

    @classmethod
    def from_object_name(cls, name: str) -> WorkloadId | None:
        """The identity an object name (``run-42``) stands for. Named before "object name" was the one
        name of that (docs/glossary.md "object name"); its callers are in workloads.cycle.reconcile."""
        return cls._parse(name, NAME_SEPARATOR)

    @classmethod
    def _parse(cls, text: str, separator: str) -> WorkloadId | None:
        """``prefix<sep>pk`` → WorkloadId; None for anything else (prefixes never contain ``sep``)."""
        prefix, found, pk = text.partition(separator)
        number = whole_number(pk, 18)
        if not found or not prefix or number is None:
            return None
        return cls(prefix, number)
