"""What every kind's admin-console list shares: read-only rows, times and the billed amount in the portal's formats.

A kind's actions (cancel, delete, scale to minimum) are destructive: none acts when chosen.
:meth:`WorkloadAdmin.confirm_first` answers the action with a page listing the selected
workloads, their teams and what will happen (Django's own "delete selected" pattern); only
its "Yes" button, which posts the same action again with ``confirmed``, acts.
"""

from __future__ import annotations

from django.contrib.admin import helpers
from django.template.response import TemplateResponse

from core.admin import ReadOnlyAdmin, money_column, when_column

#: The field the confirmation page posts; without it an action only asks.
CONFIRMED = "confirmed"


def named(workloads) -> str:
    """The workloads as a message names them: ``bert of ML Research, chat of Vision``."""
    return ", ".join(f"{w.name} of {w.team.name}" for w in workloads)


class WorkloadAdmin(ReadOnlyAdmin):
    """Read-only rows (the portal and the API change workloads); a kind's actions go through its services."""

    list_filter = ["state", "team", "flavor", "created_by"]
    search_fields = ["name", "team__slug", "created_by__username"]
    ordering = ["-created_at"]
    list_select_related = ["team", "flavor", "created_by"]

    created = when_column("created_at", "created")
    # The ledger's total as money (the column keeps ten decimals for exact sums), in the list
    # and on the detail page alike.
    billed = money_column("billed_cost", "billed")
    exclude = ["billed_cost"]
    readonly_fields = ["billed"]

    def confirm_first(self, request, queryset, action: str, consequence: str) -> TemplateResponse | None:
        """The confirmation page of ``action`` on ``queryset``; None once the user confirmed it."""
        if request.POST.get(CONFIRMED) == "yes":
            return None
        context = {**self.admin_site.each_context(request), "title": f"{action}?", "action": action,
                   "consequence": consequence, "workloads": list(queryset.select_related("team", "flavor", "created_by")),
                   "action_name": request.POST.get("action", ""), "opts": self.model._meta,
                   "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME, "confirmed": CONFIRMED}
        return TemplateResponse(request, "admin/workload_action_confirm.html", context)

