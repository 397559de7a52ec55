"""Pages of the quotas app: the team's Usage page, and the admin console's Capacity page (staff)."""

from __future__ import annotations

from decimal import Decimal

from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_GET

from portal.permissions import require_team
from quotas.ledger import month_end, month_start, usage_rows
from quotas.services import budget_summary, capacity_rows


@require_GET
@staff_member_required
def capacity(request):
    """Per flavor: what the cluster has, what teams were promised, what is used and waiting."""
    rows, error = capacity_rows()
    context = {**admin.site.each_context(request), "title": "Capacity", "rows": rows, "error": error}
    return render(request, "admin/quotas/capacity.html", context)


@require_GET
@login_required
def usage(request):
    """The current team's spend this month: by flavor, person, run and day, with CSV downloads."""
    current = request.membership
    if getattr(current, "pk", None) is None:
        return render(request, "jobs/no_team.html")
    membership = require_team(request.user, current.team)
    team = membership.team
    since = month_start()
    until = month_end(since)
    reports = {group: usage_rows([team], since, until, group) for group in ("flavor", "user", "workload", "day")}
    context = {
        "team": team, "since": since, "until": until, "reports": reports, "budget": budget_summary(team),
        "total_cost": sum((row["cost"] for row in reports["flavor"]), Decimal(0)),
        "total_gpu_hours": sum((row["gpu_hours"] for row in reports["flavor"]), Decimal(0)),
    }
    return render(request, "quotas/usage.html", context)
