"""Admin console building blocks every app's ``admin.py`` uses (this module registers nothing)."""

from __future__ import annotations

from django.contrib import admin
from django.db import transaction

from core.formatting import format_money, format_when

# -- list columns in the portal's formats -----------------------------------------------------


def when_column(field: str, description: str, precision: str = "minutes"):
    """A list column writing the time ``field`` as the portal does (``2026-11-23 14:05 UTC``), sortable by it."""

    @admin.display(description=description, ordering=field)
    def column(self, obj) -> str:
        return format_when(getattr(obj, field), precision)

    return column


def money_column(field: str, description: str, currency_field: str | None = None, *, precise: bool = False):
    """A list column writing the amount ``field`` as the portal does (``12,345.67 USD``), sortable by it.

    ``currency_field`` names the row's own currency (a budget's, a ledger row's); else the portal's.
    """

    @admin.display(description=description, ordering=field)
    def column(self, obj) -> str:
        currency = getattr(obj, currency_field) if currency_field else None
        return format_money(getattr(obj, field), currency, precise=precise)

    return column



class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows only Slipway's own code writes (admission, the reconciler, the services): staff may look, never edit."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class DeletesOneByOne(admin.ModelAdmin):
    """"Delete selected" deletes each row as its own page does, all in one transaction.

    Django's bulk delete bypasses ``delete_model``, which these admins route through a service (locked,
    audited, mirrored to the cluster); looping over it without a transaction left a half-done action
    when one row failed (the budgets before it deleted, their audit rows kept, the rest not). Rows are
    taken in ``delete_order``: one order for every caller, so two such actions lock teams alike.
    """

    delete_related: tuple[str, ...] = ()
    delete_order: tuple[str, ...] = ("pk",)

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for obj in queryset.select_related(*self.delete_related).order_by(*self.delete_order):
                self.delete_model(request, obj)
