"""What every kind's admin-console list shares: read-only rows and the billed amount as money."""

from __future__ import annotations

from django.contrib import admin

from portal.formatting import format_amount
from quotas.admin import ReadOnlyAdmin


class WorkloadAdmin(ReadOnlyAdmin):
    """Read-only rows (the portal and the API change workloads); a kind's actions go through its services."""

    list_filter = ["state", "team", "flavor", "created_by"]
    search_fields = ["name", "team__slug", "created_by__username"]
    ordering = ["-created_at"]
    list_select_related = ["team", "flavor", "created_by"]

    @admin.display(description="billed", ordering="billed_cost")
    def billed(self, workload) -> str:
        """The ledger's total as money (the column keeps ten decimals for exact sums)."""
        return format_amount(workload.billed_cost)
