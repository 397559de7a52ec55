"""Pages of the quotas app: the team's Usage page, and the admin console's Capacity page (staff)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from portal.permissions import require_team
from quotas.api import csv_download
from quotas.ledger import month_start
from quotas.reports import (
    SHOWBACK_COLUMNS,
    parse_month,
    showback_csv_rows,
    showback_filename,
    showback_page,
    usage_page,
)
from quotas.services import capacity_rows
from workloads.services import waiting_for_capacity


@require_GET
@staff_member_required
def capacity(request):
    """Per flavor and per node: what the cluster has, what teams were promised, what is used, pending and queued;
    and the work admitted but waiting for cluster capacity."""
    waiting = waiting_for_capacity()
    pending: dict[int, int] = {}
    for item in waiting:
        pending[item.workload.flavor_id] = pending.get(item.workload.flavor_id, 0) + item.units
    rows, nodes, error = capacity_rows(pending)
    context = {**admin.site.each_context(request), "title": "Capacity", "rows": rows, "nodes": nodes,
               "waiting": waiting, "error": error}
    return render(request, "admin/quotas/capacity.html", context)


@require_GET
@login_required
def usage(request):
    """The current team's spend in a month (``?month=YYYY-MM``, default this one): charts, by person, flavor and workload."""
    current = request.membership
    if getattr(current, "pk", None) is None:
        return render(request, "jobs/no_team.html")
    team = require_team(request.user, current.team).team
    now = timezone.now()
    month, error, status = parse_month(request.GET.get("month"), now), "", 200
    if month is None:
        month, error, status = month_start(now), "Pick a month from the list (YYYY-MM, not in the future).", 400
    context = {"team": team, "error": error, **usage_page(team, month, now)}
    return render(request, "quotas/usage.html", context, status=status)


@require_GET
@staff_member_required
def showback(request):
    """Staff: every team's cost, idle share and budget state in a month; ``?format=csv`` per team and flavor."""
    now = timezone.now()
    month, error, status = parse_month(request.GET.get("month"), now), "", 200
    if month is None:
        month, error, status = month_start(now), "Pick a month from the list (YYYY-MM, not in the future).", 400
    if request.GET.get("format") == "csv" and not error:
        return csv_download(showback_csv_rows(month, now), SHOWBACK_COLUMNS, showback_filename(month))
    context = {**admin.site.each_context(request), "title": "Showback", "error": error, **showback_page(month, now)}
    return render(request, "admin/quotas/showback.html", context, status=status)
