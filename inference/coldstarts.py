"""Cold-start timelines (docs/serving.md "Cold starts"): the gateway's part, the first response byte."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from inference.models import ColdStart


def record_first_byte(endpoint_id: int, at: datetime) -> None:
    """The first response byte the gateway sent after a wake from zero: sets ``first_byte`` on the endpoint's newest
    cold start from zero that has none, and marks it complete. Nothing when there is none (a second gateway's
    held request after the first one's, or a hold that was not a wake)."""
    with transaction.atomic():
        start = (ColdStart.objects.select_for_update().filter(endpoint_id=endpoint_id, from_zero=True)
                 .order_by("-started_at", "-pk").first())
        if start is None or "first_byte" in start.stages:
            return
        start.stages = {**start.stages, "first_byte": at.isoformat()}
        start.complete = True
        start.save(update_fields=["stages", "complete"])
