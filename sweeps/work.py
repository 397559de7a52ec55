"""What a sweep reads of its trials' work, through the kind registry (sweeps never name a kind): which kind
runs trials, how its states read as a trial's, and the money and GPU-hours its trials spent and commit.

**Money** (docs/sweeps.md "Money first") is read from the work itself, by the one price rule: a trial's spend
is its work's cost (the ledger's part and its open segment, :meth:`workloads.models.Workload.cost_at`); what an
unfinished trial commits is the rest of its runtime limit at its price — its cost per hour (its units at its
unit's price) times its limit, less what it spent already; a trial not placed yet is counted at the dearest price
of the clusters that offer its flavor (the quote's range), since it may land on any of them and the cap must hold.

**GPU-hours** are the ledger's physical GPU-hours of its work plus its open segment's, by the ledger's one rule
(:func:`billing.ledger.gpu_hours_to`: a MIG slice or a shared GPU a fraction of one), read as its cost is; what an
unfinished trial commits is its units' GPUs for the rest of its runtime limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ImproperlyConfigured

from billing import ledger
from billing.ledger import cost_per_hour
from core.money import ZERO
from sweeps.constants import TrialState
from workloads.registry import Trials, WorkloadKind, kinds


def trial_kind() -> WorkloadKind:
    """The kind whose work a sweep runs as its trials: the one registered with :class:`Trials`."""
    found = [kind for kind in kinds() if isinstance(kind, Trials)]
    if not found:
        raise ImproperlyConfigured("no workload kind runs a sweep's trials (none has the Trials capability)")
    return found[0]


def final(kind: WorkloadKind, workload) -> bool:
    return workload.state in kind.model.FINAL_STATES


def outcome(kind: WorkloadKind, workload) -> str:
    """A final workload's end as a trial's state: pruned, failed, stopped (ended by a user, or with its sweep),
    or completed (it ended on its own: whether with a value of the objective is the driver's to see)."""
    lc = kind.lifecycle
    if workload.state == lc.pruned:
        return TrialState.PRUNED
    if workload.state == lc.failed:
        return TrialState.FAILED
    if workload.state in (lc.ended, *lc.removed, lc.gone):
        return TrialState.STOPPED
    return TrialState.COMPLETED


@dataclass
class Spend:
    """A sweep's money and GPU-hours to now: spent, and committed by its unfinished trials."""

    spent: Decimal = ZERO
    committed: Decimal = ZERO
    gpu_hours: Decimal = ZERO
    committed_gpu_hours: Decimal = ZERO
    #: {workload uid: its cost to now}
    by_trial: dict[int, Decimal] = field(default_factory=dict)
    gpu_hours_by_trial: dict[int, Decimal] = field(default_factory=dict)


def spend(uids: list[int], now: datetime) -> Spend:
    """The money of the trials whose work is ``uids`` (module docstring), in two queries."""
    kind = trial_kind()
    found = Spend()
    if not uids:
        return found
    rows = list(kind.model.objects.with_segments().select_related("flavor", "team").filter(workload_id__in=uids))
    billed = ledger.gpu_hours_by_ref(row.ref for row in rows if row.billed_until is not None)
    for row in rows:
        cost = row.cost_at(now)
        fraction = Decimal(row.flavor.gpu_fraction)
        gpu_hours = ledger.gpu_hours_to(billed.get(row.ref, ZERO), fraction, row.open_units, row.billed_until, now)
        found.spent += cost
        found.gpu_hours += gpu_hours
        found.by_trial[row.workload_id] = cost
        found.gpu_hours_by_trial[row.workload_id] = gpu_hours
        if final(kind, row):
            continue
        units = kind.committed(row)
        minutes = Decimal(getattr(row, kind.runtime_limit, None) or 0) if kind.runtime_limit else ZERO
        price = row.unit_price()
        if row.charged_price is None and row.cluster_id is None:
            price = row.price_quote().high  # not placed yet: it may land on the dearest cluster of its flavor
        found.committed += max(cost_per_hour(price, units) * minutes / 60 - cost, ZERO)
        found.committed_gpu_hours += max(units * fraction * minutes / 60 - gpu_hours, ZERO)
    return found
