"""The one-time charged rate of work billed before ``charged_price`` existed (issue 46), from its ledger.

Used by each workload kind's data migration (``jobs``, ``inference``, ``workspaces``, the test kind).
A row with nothing open (ended, or stopped) whose ledger holds time gets the rate of its last
ledger hour — that row's cost ÷ its unit-hours, to the price's four places — so finished work
keeps showing what it was charged instead of today's price. Work with an open segment keeps
null: billing records its rate when that segment closes and the next opens (until then it is
charged, as before, the price table's). Not a migration itself (the loader skips ``_`` modules).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal


def from_ledger(app_label: str, model_name: str, prefix: str):
    """A RunPython function setting ``charged_price`` of ``app_label.model_name`` rows (refs ``prefix:pk``)."""

    def forward(apps, schema_editor) -> None:
        model = apps.get_model(app_label, model_name)
        usage = apps.get_model("quotas", "UsageRecord")
        for pk in model.objects.filter(charged_price__isnull=True, open_units=0, billed_cost__gt=0).values_list(
                "pk", flat=True).iterator():
            last = (usage.objects.filter(ref=f"{prefix}:{pk}", unit_hours__gt=0).order_by("-hour")
                    .values_list("cost", "unit_hours").first())
            if last is not None:
                rate = (last[0] / last[1]).quantize(Decimal("0.0001"), ROUND_HALF_UP)
                model.objects.filter(pk=pk).update(charged_price=rate)

    return forward
