"""What a team in a cohort borrows and lends now, and its fair share: the dashboard's and the Team page's figures.

:func:`flows` is pure over :class:`quotas.facts.CohortFigures`; :func:`team_sharing` reads
them for a page (None for a team outside any cohort, which sees nothing of this).

Who lends to whom: a cohort pools its members' lendable quota (:class:`quotas.decide.Lender`),
so a borrowed unit is not any one lender's. The pages attribute it pro rata: a member that
borrows ``b`` units (above its nominal quota) uses each other member's unused lendable quota
``u`` in the share ``b × u ÷ Σu``, which is how much of the pool each one's idle units make up.
The figures may then be fractions; their sums are exact.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from fleet.models import GpuFlavor
from quotas import fairshare
from quotas.facts import CohortFigures, cohort_figures
from quotas.models import Cohort


@dataclass(frozen=True)
class Flow:
    """Units of a flavor one member uses of another's unused quota (pro rata, see the module)."""

    team: str
    units: float


@dataclass(frozen=True)
class FlavorSharing:
    """A member's figures for one flavor of its cohort now."""

    flavor_id: int
    limit: int  #: its nominal quota
    in_use: int
    borrowed: int  #: units it holds above its nominal quota
    lent: float  #: units of its unused quota that borrowers use
    borrowed_from: tuple[Flow, ...]  #: whose unused quota its borrowed units use
    lent_to: tuple[Flow, ...]  #: who uses its unused quota
    share: float = 0.0  #: its fair share of the flavor (:mod:`quotas.fairshare`), filled by :func:`team_sharing`

    @property
    def share_text(self) -> str:
        return "\u221e" if math.isinf(self.share) else f"{self.share:.2f}"


def flows(cohort: CohortFigures, team_id: int) -> list[FlavorSharing]:
    """Per flavor the team has a quota of (or uses), what it borrows and lends now and from and to whom (pure)."""
    flavors = sorted({flavor_id for _team, flavor_id in cohort.quotas} | {f for _t, f in cohort.usage})
    rows = []
    for flavor_id in flavors:
        own = cohort.member(team_id, flavor_id)
        if (team_id, flavor_id) not in cohort.quotas and not own.in_use:
            continue
        matrix = _pro_rata(cohort, flavor_id)
        order = sorted(cohort.slugs, key=cohort.slugs.__getitem__)
        lent_to = tuple(Flow(cohort.slugs[b], matrix[b, team_id]) for b in order if (b, team_id) in matrix)
        borrowed_from = tuple(Flow(cohort.slugs[ln], matrix[team_id, ln]) for ln in order if (team_id, ln) in matrix)
        rows.append(FlavorSharing(flavor_id, own.limit, own.in_use, cohort.borrowed(team_id, flavor_id),
                                  sum(f.units for f in lent_to), borrowed_from, lent_to))
    return rows


def _pro_rata(cohort: CohortFigures, flavor_id: int) -> dict[tuple[int, int], float]:
    """``{(borrower, lender): units}`` of a flavor, each borrower's units spread over the lenders'
    unused lendable quota in proportion to it (only pairs above 0)."""
    borrowed = {member: cohort.borrowed(member, flavor_id) for member in cohort.slugs}
    unused = {}
    for member in cohort.slugs:
        figures = cohort.member(member, flavor_id)
        unused[member] = 0 if borrowed[member] else max(0, figures.lends - figures.pooled_use)
    pool = sum(unused.values())
    if not pool:
        return {}
    return {(b, ln): borrowed[b] * unused[ln] / pool for b in cohort.slugs for ln in cohort.slugs
            if b != ln and borrowed[b] and unused[ln]}


@dataclass(frozen=True)
class TeamSharingView:
    """A cohort member's sharing now, named for a page."""

    cohort: str
    weight: Decimal | None  #: its fair_weight
    flavors: list[tuple[str, FlavorSharing]]  #: (flavor name, figures), by name

    @property
    def borrows(self) -> int:
        return sum(row.borrowed for _name, row in self.flavors)

    @property
    def lends(self) -> float:
        return sum(row.lent for _name, row in self.flavors)


def team_sharing(team, usage: list[dict], now: datetime | None = None) -> TeamSharingView | None:
    """The team's cohort figures for its pages, or None outside any cohort.

    ``usage`` is the page's :func:`quotas.services.usage_bars`, whose rows name the team's cohort:
    a team outside one (or without quota rows, with nothing to lend) costs no query more; a
    member six (the cohort, its figures, the remembered borrowing, the flavors' names).
    """
    cohort_id = next((row["cohort"] for row in usage if row.get("cohort") is not None), None)
    if cohort_id is None:
        return None
    cohort = cohort_figures(cohort_id)
    remembered = fairshare.remembered_units(list(cohort.slugs), now or timezone.now())
    rows = flows(cohort, team.pk)
    names = dict(GpuFlavor.objects.filter(pk__in=[r.flavor_id for r in rows]).values_list("pk", "name"))
    shown = [(names[r.flavor_id], _with_share(r, cohort, team.pk, remembered)) for r in rows]
    name = Cohort.objects.filter(pk=cohort_id).values_list("name", flat=True).first() or ""
    return TeamSharingView(name, cohort.weights.get(team.pk), sorted(shown, key=lambda item: item[0]))


def _with_share(row: FlavorSharing, cohort: CohortFigures, team_id: int, remembered: dict[int, float]) -> FlavorSharing:
    return dataclasses.replace(row, share=fairshare.share_of(cohort, team_id, row.flavor_id, remembered))
