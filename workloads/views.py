"""What every kind's portal pages share: the current team, htmx partials, polling that stops.

htmx: one view per page; when ``request.htmx`` the view renders a partial of the same template.
Cells that poll are answered with HTTP 286 once their workload is final, which makes htmx stop
polling; the same markup is still swapped in, so the last state is shown.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from portal.models import Membership, Role
from portal.permissions import require_team

#: htmx stops polling an element whose request is answered with this status.
STOP_POLLING = 286


def current_membership(request: HttpRequest, role: str = Role.VIEWER) -> Membership | None:
    """The current team's membership (checked for ``role``), or None when the user has no team.

    ``request.membership`` is a lazy object that may wrap None; it is re-checked through
    ``require_team`` so every page uses the one access helper (403 below ``role``).
    """
    current = request.membership
    if getattr(current, "pk", None) is None:
        return None
    return require_team(request.user, current.team, role)


def no_team(request: HttpRequest) -> HttpResponse:
    """Someone in no team: platform staff land on the Capacity page, others are told to ask for one."""
    if request.user.is_staff:
        return redirect("admin-capacity")
    return render(request, "jobs/no_team.html")


def wants_partial(request: HttpRequest) -> bool:
    """An htmx swap, but not htmx restoring a page from history (that needs the full page)."""
    return bool(request.htmx) and not request.htmx.history_restore_request


def polling_status(workload) -> int:
    return STOP_POLLING if workload.is_final else 200
