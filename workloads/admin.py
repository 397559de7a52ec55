"""What every kind's admin-console list shares: read-only rows, times and the billed amount in the portal's formats."""

from __future__ import annotations

from quotas.admin import ReadOnlyAdmin, money_column, when_column


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
