"""What one unit-hour costs: the one rule every quoted and charged price comes from (issue 34).

A *price* is per unit-hour; a *cost per hour* is a price times units (docs/glossary.md "price",
"cost per hour").

Once billing began, work shows and is charged its **charged rate** instead: the price its open
segment was opened at, recorded on the quota hold whose units it bills (``QuotaHold.charged_price``,
set by ``billing.segments.plan_billing``; a workload shows its hold's as ``Workload.charged_price``)
and never re-read from the price table, so finished work
keeps the price it was billed at and a staff price change reaches only segments opened after it.

A flavor may cost a different price on each cluster (:class:`billing.models.ClusterPrice`; the
flavor's own price where a cluster sets none). Work placed on a cluster is charged that
cluster's price (:func:`billing.models.flavor_price`). Work not placed yet is quoted the price
of the cluster placement would choose *now* (:func:`cluster.placement.place`, given the clusters
as last recorded — their state, labels, nodes — so a quote never waits on a cluster), with the
range across the clusters that offer the flavor beside it: "3.60/h on east (3.60–4.60)".
When no cluster can take the work now (all that offer it draining or lost; nothing recorded
yet) the quote is the dearest of the range: a figure the work can cost and not less, since
the budget weighs it.

The form, the dry-run, run and endpoint pages, the API's ``price_per_hour``, the flavors'
``price_range``, the CLI (through the API), the estimated cost a submission commits and the
budget forecasts all take their figure from :meth:`PriceBook.quote`. Admission's budget bound
takes :func:`dearest_sql`'s: at least any price a quote or a charge can be.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from billing.ledger import cost_per_hour
from billing.models import ClusterPrice, priced
from cluster.capacity import offers
from cluster.placement import ClusterOffer, PlacementRequest, place
from core.formatting import format_amount, format_rate
from fleet.models import Cluster, GpuFlavor
from fleet.services import recorded_nodes


@dataclass(frozen=True)
class Quote:
    """The price of one unit-hour of a flavor for one piece of work, and where it comes from.

    ``cluster`` is the cluster the price is that of ("" when no cluster can take the work now);
    ``placed`` says whether the work is already placed there (the charged rate) or would be
    (a quote). ``low``/``high``: the range across the clusters that offer the flavor.
    """

    price: Decimal
    cluster: str = ""
    placed: bool = False
    low: Decimal | None = None
    high: Decimal | None = None

    def __post_init__(self) -> None:
        if self.low is None:
            object.__setattr__(self, "low", self.price)
        if self.high is None:
            object.__setattr__(self, "high", self.price)

    def charged(self, price: Decimal) -> Quote:
        """This quote as the charged rate ``price`` of work billed on its cluster (placed: no range shown)."""
        return Quote(price, self.cluster, True, self.low, self.high)

    @property
    def varies(self) -> bool:
        """Whether the clusters that offer the flavor price it differently."""
        return self.low != self.high

    def per_hour(self, units: int) -> Decimal:
        """What ``units`` cost per hour at this price (:func:`billing.ledger.cost_per_hour`)."""
        return cost_per_hour(self.price, units)

    def words(self, currency: str | None = None) -> str:
        """"3.60 USD/h on east (3.60–4.60)"; placed: "3.60 USD/h on east"; no cluster can take it now:
        "3.60–4.60 USD/h, by the cluster it starts on"; one price everywhere and no cluster: "3.60 USD/h".
        ``currency`` defaults to ``SLIPWAY_CURRENCY``; money per hour's one rounding (:func:`core.formatting.format_rate`)."""
        if not self.cluster:
            if self.varies:
                low = format_amount(self.low, precise=True)
                return f"{low}\u2013{format_rate(self.high, currency)}/h, by the cluster it starts on"
            return f"{format_rate(self.price, currency)}/h"
        text = f"{format_rate(self.price, currency)}/h on {self.cluster}"
        if self.varies and not self.placed:
            text += f" ({format_amount(self.low, precise=True)}\u2013{format_amount(self.high, precise=True)})"
        return text


class PriceBook:
    """Quotes from the clusters as read once (two statements on the first quote, none after): a
    page or a list quotes every row from one read. Not shared across requests — a cluster's
    state and prices change."""

    def __init__(self) -> None:
        self._clusters: list[Cluster] | None = None
        self._overrides: dict[int, dict[int, tuple[Decimal, Decimal | None]]] | None = None

    def _read(self) -> tuple[list[Cluster], dict[int, dict[int, tuple[Decimal, Decimal | None]]]]:
        if self._clusters is None:
            self._clusters = list(Cluster.objects.prefetch_related("pools__flavor").order_by("name"))
            overrides: dict[int, dict[int, tuple[Decimal, Decimal | None]]] = {}
            for flavor_id, cluster_id, price, spot in ClusterPrice.objects.values_list(
                    "flavor_id", "cluster_id", "price_per_hour", "spot_price_per_hour"):
                overrides.setdefault(flavor_id, {})[cluster_id] = (price, spot)
            self._overrides = overrides
        return self._clusters, self._overrides

    def price_on(self, flavor: GpuFlavor, spot: bool, cluster_id: int) -> Decimal:
        """A unit-hour of ``flavor`` on the cluster ``cluster_id``: what work placed there is charged."""
        _, overrides = self._read()
        return priced(flavor, overrides.get(flavor.pk, {}).get(cluster_id), spot)

    def quote(self, flavor: GpuFlavor, spot: bool = False, *, cluster_id: int | None = None, units: int = 1,
              units_per_node: int | None = None, selector: dict | None = None,
              training_framework: str = "") -> Quote:
        """The price of a unit-hour of ``flavor`` for work shaped ``units`` (``units_per_node`` a
        worker) with ``selector`` (and ``training_framework``: only clusters whose training API takes it):
        placed on ``cluster_id``, that cluster's; else the price on the cluster placement would choose now
        (module docstring). The range is over the clusters placement may choose among."""
        clusters, _ = self._read()
        prices = {c.name: self.price_on(flavor, spot, c.pk) for c in clusters}
        spec = flavor.to_spec()
        able = [c for c in clusters if c.training.takes(training_framework)]
        offering = [c.name for c in able if any(offers(n, spec) for n in recorded_nodes(c))] or list(prices)
        low = min((prices[n] for n in offering), default=None)
        high = max((prices[n] for n in offering), default=None)
        if cluster_id is not None:
            placed = next((c for c in clusters if c.pk == cluster_id), None)
            if placed is not None:
                return Quote(prices[placed.name], placed.name, True, low, high)
        if not clusters:  # a fresh install before its clusters are recorded: the flavor's own price
            return Quote(priced(flavor, None, spot))
        request = PlacementRequest.shaped(spec, units, units_per_node or units, spot, selector,
                                          training_framework=training_framework)
        best = place(request, [ClusterOffer(name=c.name, state=c.state, nodes=tuple(recorded_nodes(c)),
                                            prices={flavor.name: prices[c.name]},
                                            spot_prices={flavor.name: prices[c.name]} if spot else {},
                                            labels=dict(c.labels), training_api=c.effective_training_api,
                                            frameworks=c.frameworks)
                               for c in clusters]).best
        if best is None:
            return Quote(high, "", False, low, high)
        return Quote(prices[best.cluster], best.cluster, False, low, high)


def quote(flavor: GpuFlavor, spot: bool = False, **shape) -> Quote:
    """:meth:`PriceBook.quote` from a read of its own (one quote; a list makes one :class:`PriceBook`)."""
    return PriceBook().quote(flavor, spot, **shape)


def dearest_sql(quote_name, flavor_table: str) -> str:
    """SQL for the dearest unit-hour any work can be quoted or charged (a bound for admission's
    budget check): the highest flavor price or cluster price, on-demand or spot."""
    prices = quote_name(ClusterPrice._meta.db_table)
    return (f"(SELECT MAX(p) FROM"  # noqa: S608 - only quoted model table names are interpolated
            f" (SELECT MAX(price_per_hour) AS p FROM {flavor_table}"
            f" UNION ALL SELECT MAX(spot_price_per_hour) FROM {flavor_table}"
            f" UNION ALL SELECT MAX(price_per_hour) FROM {prices}"
            f" UNION ALL SELECT MAX(spot_price_per_hour) FROM {prices}) AS prices)")
