"""What the Usage page and the staff showback page show: one function per page, the views stay thin.

Figures come from the ledger (:func:`billing.ledger.usage_table`, open segments included) and
the budget summary; charts are drawn from them by :mod:`billing.charts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.utils import timezone

from billing import charts
from billing.ledger import (
    REPORT_SUMS,
    RefLabel,
    kind_nouns,
    month_end,
    month_start,
    ref_labels,
    usage_rows,
    usage_table,
    with_physical,
)
from billing.models import BudgetMonth, TeamBudget
from billing.pool_idle import IdlePools, idle_pool_capacity
from billing.services import budget_summaries, budget_summary
from core.formatting import plain_amount
from core.money import ZERO
from fleet.models import GpuFlavor
from teams.models import Team

#: How many months back the month picker offers.
MONTHS_BACK = 12


def parse_month(raw: str | None, now: datetime) -> datetime | None:
    """The start of the month ``YYYY-MM`` names (local time), the current one when empty; None when invalid or ahead."""
    if not raw:
        return month_start(now)
    try:
        year, month = (int(part) for part in raw.split("-"))
        first = month_start(timezone.make_aware(datetime(year, month, 2)))  # the ledger's month boundary
    except (ValueError, TypeError, OverflowError):
        return None
    return first if first <= month_start(now) and year >= 2000 else None


def month_choices(now: datetime) -> list[tuple[str, str]]:
    """``(YYYY-MM, "November 2026")`` for the month picker, newest first."""
    choices, first = [], month_start(now)
    for _ in range(MONTHS_BACK + 1):
        choices.append((f"{first:%Y-%m}", f"{first:%B %Y}"))
        first = month_start(first - timedelta(days=1))
    return choices


@dataclass(frozen=True)
class ShareRow:
    """One person's or workload's use: a bar whose idle part is drawn apart, and its figures."""

    label: str
    url: str
    gpu_hours: Decimal  #: physical GPU-hours (billing.ledger.interval_gpu_hours)
    cost: Decimal
    idle_gpu_hours: Decimal
    idle_cost: Decimal
    width: float  #: percent of the largest cost
    idle_width: float  #: percent of the largest cost that was idle
    unit_hours: Decimal = ZERO  #: the flavors' units held × hours (billing.ledger.interval_unit_hours)

    @property
    def physical_gpu_hours(self) -> Decimal:
        """Its GPU-hours under the name that cannot be taken for unit-hours (the same figure)."""
        return self.gpu_hours

    @property
    def idle_share(self) -> float:
        """Percent of the cost that paid for idle GPUs."""
        return float(self.idle_cost / self.cost * 100) if self.cost else 0.0


def share_rows(rows: list[dict], labels: dict[str, RefLabel] | None = None) -> list[ShareRow]:
    """Report rows as bars, costliest first; ``labels`` names groups (a workload's name and page)."""
    rows = sorted(rows, key=lambda r: (-r["cost"], r["group"]))
    largest = max((r["cost"] for r in rows), default=ZERO) or Decimal(1)
    shares = []
    for row in rows:
        named = (labels or {}).get(row["group"]) or RefLabel(row["group"] or "—")
        shares.append(ShareRow(named.name, named.url, row["gpu_hours"], row["cost"], row["idle_gpu_hours"], row["idle_cost"],
                               round(float(row["cost"] / largest * 100), 1),
                               round(float(row["idle_cost"] / largest * 100), 1), row["unit_hours"]))
    return shares


def _daily_by_flavor(teams: list[Team], since: datetime, until: datetime, now: datetime) -> tuple[list, list, dict]:
    """Days of the period up to today, the flavors used, and cost per (day, flavor)."""
    cells = usage_table(teams, since, until, ("day", "flavor"), now)
    values = {(date.fromisoformat(c["day"]), c["flavor"]): c["cost"] for c in cells}
    order = {name: i for i, name in enumerate(GpuFlavor.objects.order_by("name").values_list("name", flat=True))}
    flavors = sorted({c["flavor"] for c in cells}, key=lambda name: (order.get(name, len(order)), name))
    last = min(until - timedelta(seconds=1), max(now, since))
    days = [since.date() + timedelta(days=d) for d in range((timezone.localtime(last).date() - since.date()).days + 1)]
    return days, flavors, values


def _limit_of_month(team: Team, month: datetime, today: Decimal | None) -> Decimal | None:
    """The monthly limit ``team`` had in ``month`` (None: no budget then), from the budget history.

    A team with no history at all (a budget written around the quota services) has ``today``'s.
    """
    row = BudgetMonth.objects.of_month(team, timezone.localtime(month).date())
    return row.monthly_limit if row is not None else today


def kind_rows(rows: list[dict], kind_names: dict[str, str]) -> list[ShareRow]:
    """The report by kind (``group``: a ref prefix) as bars, each kind called what ``kind_names`` says
    (``{prefix: "Workspaces"}``; the registry's, which quotas cannot read); a kind it does not know
    (one removed since) keeps its prefix."""
    return share_rows(rows, {prefix: RefLabel(name) for prefix, name in kind_names.items()})


def idle_by_kind(rows: list[ShareRow]) -> list[ShareRow]:
    """Of :func:`kind_rows`, those that paid for idle GPUs, the most idle cost first: how a month's idle cost
    splits by kind (the Usage page's summary and each team's line on the showback page)."""
    return sorted((row for row in rows if row.idle_cost), key=lambda row: (-row.idle_cost, row.label))


def usage_page(team: Team, month: datetime, now: datetime | None = None,
               kind_names: dict[str, str] | None = None, staff: bool = False) -> dict:
    """Everything the team's Usage page shows for ``month`` (its first instant).

    ``kind_names``: what each workload kind is called (``{prefix: plural}``, the view reads the
    registry). The card by kind is the API's report by kind (:func:`usage_rows`), so each kind's
    idle cost is apart from the others' — what interactive work left idle shows next to what jobs
    and services did without the page naming any kind. The summary's split of the idle cost
    (``idle_by_kind``) is those rows' idle figures, costliest first: one rule, two places.

    ``staff``: the viewer is platform staff, who also see the month's idle pool capacity
    (:func:`billing.pool_idle.idle_pool_capacity`, ``idle_pools``; None for anyone else): provisioned, not
    used, nobody's bill, so no team member sees it on their team's page.
    """
    now = now or timezone.now()
    since, until = month, month_end(month)
    current = since == month_start(now)
    currency = settings.SLIPWAY_CURRENCY
    reports = {group: usage_rows([team], since, until, group, now) for group in ("flavor", "user", "workload", "kind")}
    by_kind = kind_rows(reports["kind"], kind_names or {})
    days, flavors, values = _daily_by_flavor([team], since, until, now)
    daily_totals = [(day, sum((values.get((day, f), ZERO) for f in flavors), ZERO)) for day in days]
    spent = sum((cost for _day, cost in daily_totals), ZERO)
    budget = budget_summary(team, now)
    # A past month is drawn against the budget it had, not today's (the budget history).
    limit = budget["monthly_limit"] if current else _limit_of_month(team, since, budget["monthly_limit"])
    burn = charts.burn_chart(
        since, until, daily_totals, now if current else until, spent=budget["spent_month"] if current else spent,
        committed=budget["committed"] if current else None,
        projected=budget["projected_month_end"] if current else None, limit=limit,
        runs_out_at=budget["runs_out_at"] if current else None, currency=currency)
    totals = with_physical({key: sum((row[key] for row in reports["flavor"]), ZERO) for key in REPORT_SUMS})
    return {
        "since": since, "until": until, "current": current,
        # The report API's period for the CSV links: its ``until`` date counts as a whole day.
        "period_query": f"since={since:%Y-%m-%d}&until={until - timedelta(days=1):%Y-%m-%d}",
        "month_label": f"{since:%B %Y}",
        "month": f"{since:%Y-%m}", "months": month_choices(now),
        "budget": budget, "currency": currency, "totals": totals,
        "idle_share": float(totals["idle_cost"] / totals["cost"] * 100) if totals["cost"] else 0.0,
        "by_flavor": share_rows(reports["flavor"]), "by_person": share_rows(reports["user"]),
        "by_workload": share_rows(reports["workload"], ref_labels([r["group"] for r in reports["workload"]])),
        "by_kind": by_kind,
        "idle_by_kind": idle_by_kind(by_kind),
        "daily": charts.daily_stacked(days, flavors, values, currency), "burn": burn,
        "idle_threshold": settings.SLIPWAY_IDLE_UTIL_PCT,
        "idle_pools": idle_pool_capacity(since, until) if staff else None,
    }


@dataclass(frozen=True)
class TeamMoney:
    """One team's line on the showback page."""

    team: Team
    usage: ShareRow
    budget: dict
    #: Its idle cost split by workload kind (:func:`idle_by_kind`).
    idle_by_kind: list[ShareRow] = field(default_factory=list)


def showback_page(month: datetime, now: datetime | None = None, kind_names: dict[str, str] | None = None) -> dict:
    """Every team's cost, idle share (split by workload kind, each called what ``kind_names`` says: see
    :func:`usage_page`) and budget state for ``month`` (staff), with the per-flavor CSV rows, and the month's
    idle pool capacity (:func:`billing.pool_idle.idle_pool_capacity`: nobody's bill, beside the teams')."""
    now = now or timezone.now()
    since, until = month, month_end(month)
    teams = list(Team.objects.order_by("slug"))
    by_team = {row["group"]: row for row in usage_rows(teams, since, until, "team", now)}
    kinds_of: dict[str, list[dict]] = {}
    for row in usage_table(teams, since, until, ("team", "kind"), now):
        kinds_of.setdefault(row.pop("team"), []).append({"group": row.pop("kind"), **row})
    blank = dict.fromkeys(REPORT_SUMS, ZERO)
    shares = {s.label: s for s in share_rows([{"group": t.slug, **by_team.get(t.slug, blank)} for t in teams])}
    budgets = budget_summaries(list(TeamBudget.objects.values_list("team_id", flat=True)), now)  # all at once
    lines = [TeamMoney(team, shares[team.slug], budgets.get(team.pk, {}),
                       idle_by_kind(kind_rows(kinds_of.get(team.slug, []), kind_names or {}))) for team in teams]
    lines.sort(key=lambda line: (-line.usage.cost, line.team.slug))
    days, flavors, values = _daily_by_flavor(teams, since, until, now)
    return {
        "since": since, "until": until, "month": f"{since:%Y-%m}", "months": month_choices(now),
        "month_label": f"{since:%B %Y}", "current": since == month_start(now), "lines": lines, "currency": settings.SLIPWAY_CURRENCY,
        "total": sum((line.usage.cost for line in lines), ZERO),
        "idle_total": sum((line.usage.idle_cost for line in lines), ZERO),
        "preempted_total": sum((row["preempted_cost"] for row in by_team.values()), ZERO),
        "daily": charts.daily_stacked(days, flavors, values, settings.SLIPWAY_CURRENCY),
        "idle_pools": idle_pool_capacity(since, until),
    }


# -- downloads ----------------------------------------------------------------------------

#: Columns of the cost report (``GET /usage/``, JSON fields and CSV columns alike).
REPORT_COLUMNS = ["group", "gpu_hours", "cost", "idle_gpu_hours", "idle_cost", "borrowed_gpu_hours",
                  "preempted_gpu_hours", "preempted_cost", "currency"]
#: The two figures of time by their unmistakable names (issue 37.6): last, so the columns files had before
#: keep their places.
HOURS_COLUMNS = ["unit_hours", "physical_gpu_hours"]
#: The report by workload names each one: ``group`` is its ledger ref (``run:13``), the rest say what it is.
WORKLOAD_DETAILS = ["name", "kind", "team", "user", "flavor"]
#: ...and ``label`` says it as people are told everywhere ("run bert (#13) of team nlp"): the CSV's
#: last column, so the columns files had before keep their places.
WORKLOAD_LABEL = "label"


def report_columns(group_by: str) -> list[str]:
    """The CSV columns of the report grouped by ``group_by``."""
    if group_by != "workload":
        return REPORT_COLUMNS + HOURS_COLUMNS
    return REPORT_COLUMNS[:1] + WORKLOAD_DETAILS + REPORT_COLUMNS[1:] + [WORKLOAD_LABEL] + HOURS_COLUMNS


def usage_report(teams, since: datetime, until: datetime, group_by: str, now: datetime | None = None) -> list[dict]:
    """The cost report of ``teams`` in ``[since, until)``: rows ``{group, gpu_hours, cost, idle_gpu_hours,
    idle_cost, borrowed_gpu_hours, preempted_gpu_hours, preempted_cost, currency}``
    (:func:`billing.ledger.usage_table`), per day in time order, per anything else costliest first.

    By kind, ``group`` is the workload kind's noun (``run``, ``endpoint``: :func:`billing.ledger.kind_nouns`),
    as the report by workload's ``kind`` says it; a prefix no kind claims (work of a kind since removed)
    stays its prefix. By workload each row also says what the workload is — ``name``, ``kind`` (run, endpoint),
    ``team``, ``user`` (who started it), ``flavor``, and ``label``, all of it in the words every
    message uses (:meth:`billing.ledger.RefLabel.words`) — since its ledger ref alone tells nobody.
    A workload whose row is gone is labelled by its ref and team.
    """
    if group_by == "workload":
        rows = usage_table(teams, since, until, ("workload", "team", "user", "flavor"), now)
        labels = ref_labels([row["workload"] for row in rows])
        for row in rows:
            ref = row.pop("workload")
            named = labels.get(ref)
            row.update(group=ref, name=named.name if named else "", kind=named.noun if named else "",
                       label=(named or RefLabel(ref, team=row["team"])).words())
    elif group_by == "kind":  # the ledger groups by the refs' prefix; people and scripts read the noun
        nouns = kind_nouns()
        rows = [{**row, "group": nouns.get(row["group"], row["group"])}
                for row in usage_rows(teams, since, until, group_by, now)]
    else:
        rows = usage_rows(teams, since, until, group_by, now)
    if group_by != "day":
        rows.sort(key=lambda row: (-row["cost"], row["group"]))
    return rows


def period_label(since: datetime, until: datetime) -> str:
    """``2026-11`` for (part of) one month from its start, else ``2026-11-03-to-2026-11-09`` (``until`` excluded)."""
    first, last = timezone.localtime(since), timezone.localtime(until - timedelta(microseconds=1))
    if first == month_start(first) and (last.year, last.month) == (first.year, first.month):
        return f"{first:%Y-%m}"
    return f"{first:%Y-%m-%d}-to-{last:%Y-%m-%d}"


def report_filename(teams: list[Team], since: datetime, until: datetime, group_by: str,
                    who: str | None = None) -> str:
    """What and when: ``usage-ml-research-2026-11-by-workload.csv`` (``my-teams`` for several teams,
    unless ``who`` names them, e.g. ``all-teams`` for staff)."""
    who = who or (teams[0].slug if len(teams) == 1 else "my-teams")
    return f"usage-{who}-{period_label(since, until)}-by-{group_by}.csv"


#: Columns of the showback CSV: one row per team and flavor, then the idle pool capacity's rows per cluster and
#: flavor; ``cluster`` (only those rows fill it) last, so the columns files had before keep their places.
SHOWBACK_COLUMNS = ["team", "flavor", "gpu_hours", "cost", "idle_gpu_hours", "idle_cost", "borrowed_gpu_hours",
                    "preempted_gpu_hours", "preempted_cost", "currency", *HOURS_COLUMNS, "cluster"]
#: The showback CSV's ``team`` for idle pool capacity: nobody's bill, in words no team slug can be (a slug has
#: no spaces), so a spreadsheet's pivot by team shows it as a line of its own.
IDLE_POOL_TEAM = "idle pool capacity"

#: GPU-hours in downloads: to a ten-thousandth (a MIG slice for a minute is 0.0024).
HOURS = Decimal("0.0001")


def showback_csv_rows(month: datetime, now: datetime | None = None) -> list[dict]:
    """The showback report per team and flavor for ``month``: what the CSV download holds, as people read it
    (money in cents, :func:`core.formatting.plain_amount`; GPU-hours to four places).

    Under the teams' rows, as on the page, the month's idle pool capacity (:func:`idle_pool_rows`), so the page
    and its file show one figure; the file is staff's, as the page is."""
    teams = list(Team.objects.order_by("slug"))
    rows = usage_table(teams, month, month_end(month), ("team", "flavor"), now)
    rows += idle_pool_rows(idle_pool_capacity(month, month_end(month)))
    for row in rows:
        row.update({key: plain_amount(row[key]) for key in ("cost", "idle_cost", "preempted_cost")})
        row.update({key: f"{row[key].quantize(HOURS, ROUND_HALF_UP):f}"
                    for key in ("gpu_hours", "idle_gpu_hours", "borrowed_gpu_hours", "preempted_gpu_hours",
                                *HOURS_COLUMNS)})
    return rows


def idle_pool_rows(idle: IdlePools) -> list[dict]:
    """Idle pool capacity as showback rows, one per cluster and flavor, under :data:`IDLE_POOL_TEAM`.

    All of it was idle — provisioned and held by nobody — so its idle figures are its whole; nobody borrowed or
    lost any of it to preemption. ``gpu_hours`` is physical, as every row's."""
    return [{"team": IDLE_POOL_TEAM, "cluster": row.cluster, "flavor": row.flavor,
             "gpu_hours": row.gpu_hours, "cost": row.cost, "idle_gpu_hours": row.gpu_hours, "idle_cost": row.cost,
             "borrowed_gpu_hours": ZERO, "preempted_gpu_hours": ZERO, "preempted_cost": ZERO,
             "currency": idle.currency, "unit_hours": row.unit_hours, "physical_gpu_hours": row.gpu_hours}
            for row in idle.rows]


def showback_filename(month: datetime) -> str:
    """``showback-2026-11-by-team-and-flavor.csv``."""
    return f"showback-{timezone.localtime(month):%Y-%m}-by-team-and-flavor.csv"
