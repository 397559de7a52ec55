"""Template filters of the run pages: what a run's row says of its running time (:func:`jobs.page.run_time`)."""

from __future__ import annotations

from django import template
from django.utils import timezone

from jobs.page import RunTime, run_time

register = template.Library()


@register.filter
def ran(run) -> RunTime:
    """``{% with t=run|ran %}``: the run's time as its page says it (the list's "running 5 min", "ran 2 h"), from
    its own row (no query)."""
    return run_time(run, timezone.now())
