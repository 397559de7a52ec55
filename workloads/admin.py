"""What every kind's admin-console list shares: read-only rows, times and the billed amount in the portal's formats,
and the one "End selected" action (each kind's own end: a run's cancel, an endpoint's delete); the alert episodes.

The actions (end, an endpoint's scale to minimum) are destructive: none acts when chosen.
:meth:`WorkloadAdmin.confirm_first` answers the action with a page listing the selected
workloads, their teams and what will happen (Django's own "delete selected" pattern); only
its "Yes" button, which posts the same action again with ``confirmed``, acts.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse
from django.utils.text import capfirst

from core.admin import ReadOnlyAdmin, money_column, when_column
from workloads.models import AlertEpisode
from workloads.registry import Pages, kind_for, label_of

#: The field the confirmation page posts; without it an action only asks.
CONFIRMED = "confirmed"


def named(workloads) -> str:
    """The workloads as every message names them: ``run bert (#12) of team nlp, run chat (#13) of team vision``."""
    return ", ".join(label_of(w).words() for w in workloads)


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
    actions = ["end_selected"]

    @admin.action(description="End selected (quota released, cluster objects deleted)")
    def end_selected(self, request, queryset):
        """The kind's end of each selected workload (:meth:`WorkloadKind.end`); those that already ended are skipped."""
        kind = kind_for(self.model.KIND_PREFIX)
        asked = self.confirm_first(request, queryset, f"{Pages.of(kind).end_verb} the selected {kind.plural}",
                                   "Their cluster objects are deleted and their GPU units go back to their teams' "
                                   "quotas at once. This cannot be undone.")
        if asked is not None:
            return asked
        ended = []
        for workload in queryset.select_related("team", "flavor"):
            try:
                kind.end(request.user, workload)
            except kind.conflict_error:
                continue  # already ended: nothing to do
            ended.append(workload)
        # The names carry the noun ("Cancelled: run bert (#12) of team nlp."), so no count of "run(s)" before them.
        ended_word = Pages.of(kind).ended_word
        said = f"{capfirst(ended_word)}: {named(ended)}." if ended else f"No {kind.noun} {ended_word}."
        self.message_user(request, said, messages.SUCCESS)

    def confirm_first(self, request, queryset, action: str, consequence: str) -> TemplateResponse | None:
        """The confirmation page of ``action`` on ``queryset``; None once the user confirmed it."""
        if request.POST.get(CONFIRMED) == "yes":
            return None
        chosen = list(queryset.select_related("team", "flavor", "created_by"))
        context = {**self.admin_site.each_context(request), "title": f"{action}?", "action": action,
                   "consequence": consequence, "workloads": [(w, label_of(w).words()) for w in chosen],
                   "action_name": request.POST.get("action", ""), "opts": self.model._meta,
                   "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME, "confirmed": CONFIRMED}
        return TemplateResponse(request, "admin/workload_action_confirm.html", context)



@admin.register(AlertEpisode)
class AlertEpisodeAdmin(ReadOnlyAdmin):
    """Alert episodes on workloads' GPUs (workloads.telemetry.alerts): a hot GPU's are staff's to act on (the
    team is not told); idle and OOM-risk ones are what teams were told. Written by the reconcile cycle only."""

    list_display = ["since_column", "alert_kind", "ref", "team", "cluster", "state", "value", "threshold", "gpu",
                    "opened", "closed"]
    list_filter = ["alert_kind", "state", "cluster"]
    search_fields = ["ref", "team__slug", "gpu"]
    list_select_related = ["team", "cluster"]
    ordering = ["-since"]
    since_column = when_column("since", "since")
    opened = when_column("opened_at", "opened")
    closed = when_column("closed_at", "closed")
