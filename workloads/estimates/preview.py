"""The preview of a submission: what submitting it would do now, with nothing written (docs/glossary.md "preview").

One concept, one answer (:class:`Preview`), shown on three surfaces: the New run and New
endpoint forms' live preview panel, the API's dry run (``POST …?dry_run=1``: the same answer as
JSON) and ``slipway run --dry-run`` (the API's answer as a table). A kind's ``preview``
(:meth:`workloads.registry.Api.preview`) shapes its fields into a quota request and
asks :func:`preview_request`, which reads admission's decision without locking or writing
(:func:`quotas.queue.preview`), the one price (:mod:`billing.pricing`), the budget, and —
when the request would wait for quota — its place in the queue and its start estimate
(:mod:`workloads.estimates.forecast`), as when it would be admitted but must wait for an elastic pool's
new nodes (its start, from the same simulation).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from billing import reserved
from billing.ledger import hours_left_in_month
from billing.pricing import Quote
from billing.services import budget_summary
from core.formatting import format_duration, format_when
from core.priority import Priority
from fleet.models import NodePool
from quotas.constants import AdmissionCode
from quotas.decide import Decision, ResourceRequest
from quotas.models import QueuedRequest
from quotas.queue import held_beyond_quota, preview, queue_position
from workloads.estimates.forecast import awaited_window, estimated_starts, held_estimate


@dataclass(frozen=True)
class Preview:
    """What submitting a request would do now; nothing is written (the form's preview, the API's dry run)."""

    outcome: str  #: "admit" | "queue" | "reject" | "invalid"
    message: str
    cost_per_hour: Decimal | None = None
    #: At most this in all: its rate until its known end (a run's runtime limit; docs/glossary.md
    #: "estimated total cost", the same figure as a run's ``estimated_total_cost``). None without one.
    estimated_total_cost: Decimal | None = None
    share_of_budget_left: Decimal | None = None  #: committed_cost's share of what the month's budget leaves
    queue_position: int | None = None
    estimated_start_at: datetime | None = None
    #: The range around it (:class:`workloads.estimates.forecast.StartEstimate`): the bound is ``estimated_start_latest``.
    estimated_start_earliest: datetime | None = None
    estimated_start_latest: datetime | None = None
    start: str = ""  #: the estimate in words (:meth:`workloads.estimates.forecast.StartEstimate.words`)
    #: What the budget gate counts (ResourceRequest.committed_cost): its estimate until the
    #: month's end at most; without a runtime limit, its cost until the month's end.
    committed_cost: Decimal | None = None
    #: Units it would borrow from the team's cohort (Decision.borrows): any makes it preemptible.
    borrows: int = 0
    #: :func:`borrow_words` for the form's preview ("" when it borrows none); not part of the API's answer.
    borrow_note: str = ""
    #: :func:`overrun_words` for the form's preview ("" unless it goes into a reserved window it may outlast).
    window_note: str = ""
    #: The unit-hour's price and the cluster it is that of (:mod:`billing.pricing`, the one rule).
    price: Quote | None = None
    #: Where the choice contradicts the flavor advice (:func:`quotas.policy.warnings`): said, never refused.
    warnings: tuple[str, ...] = ()
    #: Work that has no end by its nature (an endpoint, a workspace): no total, only ``committed_cost``,
    #: its cost to the month's end (at its minimum), which the forms and the CLI show instead.
    open_ended: bool = False

    @property
    def price_per_hour(self) -> Decimal | None:
        return self.price.price if self.price is not None else None

    @property
    def price_words(self) -> str:
        """"3.60 USD/h on east (3.60–4.60)": the form's price line (:meth:`billing.pricing.Quote.words`)."""
        return self.price.words() if self.price is not None else ""

    @property
    def cluster(self) -> str | None:
        """The cluster the work would go to now (None when none can take it now)."""
        return (self.price.cluster or None) if self.price is not None else None

    @property
    def preemptible(self) -> bool:
        return self.borrows > 0

    @property
    def deprecated_total(self) -> Decimal | None:
        """The deprecated ``estimated_total`` (docs/api.md "Deprecated"): it meant two things — a run's
        total, open-ended work's month — now ``estimated_total_cost`` and ``committed_cost``."""
        return self.committed_cost if self.open_ended else self.estimated_total_cost

    def as_dict(self) -> dict:
        return {"outcome": self.outcome, "message": self.message, "cost_per_hour": self.cost_per_hour,
                "estimated_total_cost": self.estimated_total_cost, "estimated_total": self.deprecated_total,
                "share_of_budget_left": self.share_of_budget_left,
                "queue_position": self.queue_position, "estimated_start_at": self.estimated_start_at,
                "estimated_start_earliest": self.estimated_start_earliest,
                "estimated_start_latest": self.estimated_start_latest, "start": self.start, "committed_cost": self.committed_cost, "borrows": self.borrows,
                "preemptible": self.preemptible, "price_per_hour": self.price_per_hour, "cluster": self.cluster,
                "currency": settings.SLIPWAY_CURRENCY, "warnings": list(self.warnings)}


def borrow_words(decision: Decision, flavor: str) -> str:
    """"borrows 2× a100-80gb from the cohort; preemptible (nlp may take them back)", or "" when
    ``decision`` borrows nothing: what a borrowing admission means for the work, in the forms' words."""
    if not decision.borrows:
        return ""
    names = list(decision.lent_by)
    who = (" and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else names[0]) if names else "the cohort"
    return f"borrows {decision.borrows}\u00d7 {flavor} from the cohort; preemptible ({who} may take them back)"


def overrun_words(start: datetime, duration: timedelta | None, window_end: datetime) -> str:
    """The form's warning for work going into one of its team's reserved windows at ``start`` that may run past
    the window's ``end`` ("" when its runtime limit ends inside it): past the end it is on the team's quota, and
    borrowed — preemptible — where the quota is full (docs/reservations.md "At the end")."""
    if duration is not None and start + duration <= window_end:
        return ""
    until = format_when(window_end)
    what = (f"its runtime limit ({format_duration(duration)}) runs past the end of the team's reservation at {until}"
            if duration is not None else f"it has no runtime limit, and the team's reservation ends at {until}")
    return f"{what}: from then it runs on the team's quota — borrowed, and preemptible, where the quota is full"


def _after_growth(result: Preview, team, entry: QueuedRequest, decision: Decision, duration: timedelta | None,
                  now: datetime) -> Preview:
    """An admitted request's start when the ready nodes cannot hold it and an elastic pool must grow first
    (docs/pools.md "Start estimates"): the queue's own simulation says when, with the pool's median and tail, as
    it would the moment the request were queued; ``result`` as it is when it starts at once. One query when no
    pool offers its flavor (a fixed inventory: admitted work starts now, nothing to say); spot work and work
    admitted into a reserved window never wait for a pool's nodes."""
    if decision.reserved or entry.spot or not NodePool.objects.filter(flavor_id=entry.flavor_id).exists():
        return result
    estimate = estimated_starts(team, now, candidate=(entry, duration)).get(entry.ref)
    if estimate is None or estimate.at is None or not estimate.grows:
        return result
    return dataclasses.replace(result, estimated_start_at=estimate.at, estimated_start_earliest=estimate.earliest,
                               estimated_start_latest=estimate.latest, start=estimate.words(now))


def preview_request(team, request: ResourceRequest, flavor, duration: timedelta | None,
                    price: Quote | None = None) -> Preview:
    """Price, budget share and admission outcome of ``request`` (for ``flavor``, its unit-hour at
    ``price``) — with a queue position and start estimate when it would wait for quota.

    The rate is what admitting it commits per hour (``request.cost_per_hour``, the figure the
    budget gate weighs: an endpoint's minimum), else its units at ``price``.
    """
    now = timezone.now()
    rate = request.cost_per_hour
    if rate is None and price is not None:
        rate = price.per_hour(request.units)
    total = request.estimated_cost
    committed = request.committed_cost(hours_left_in_month(now))
    decision = preview(team, request)
    share = None
    budget = budget_summary(team, now)
    if committed is not None and budget["monthly_limit"] is not None:
        left = budget["left"]
        share = (committed / left).quantize(Decimal("0.0001")) if left > 0 else None
    result = Preview(decision.outcome, decision.reason.words, rate, total, share, committed_cost=committed,
                      borrows=decision.borrows, borrow_note=borrow_words(decision, request.flavor), price=price)
    if decision.reserved:
        named = reserved.named_ref(request.for_reservation)
        room = reserved.take(reserved.rooms([team.pk], now, flavor.pk).get((team.pk, flavor.pk), []), request.units,
                             named)
        if room is not None:
            result = dataclasses.replace(result, window_note=overrun_words(now, duration, room.end))
    if flavor is None or not (decision.queued or decision.admitted):
        return result
    entry = QueuedRequest(team=team, ref="dry-run", flavor=flavor, units=request.units,
                          units_per_node=request.units_per_node, priority=Priority(request.priority).rank,
                          spot=request.spot, for_reservation=request.for_reservation)
    if not decision.queued:
        return _after_growth(result, team, entry, decision, duration, now)
    position = queue_position(team, entry)
    held = held_beyond_quota(team, (entry.ref, request))
    if decision.reason.code == AdmissionCode.WAITING_FOR_QUOTA:
        estimate = estimated_starts(team, now, candidate=(entry, duration), held=held).get(entry.ref)
    else:
        estimate = held_estimate(held.get(entry.ref, decision), now)
    window = awaited_window(entry, held[entry.ref], now) if entry.ref in held else None
    if window is not None:
        result = dataclasses.replace(result, window_note=overrun_words(window.start, duration, window.end))
    return dataclasses.replace(result, queue_position=position, estimated_start_at=estimate.at if estimate else None,
                               estimated_start_earliest=estimate.earliest if estimate else None,
                               estimated_start_latest=estimate.latest if estimate else None,
                               start=estimate.words(now) if estimate else "")
