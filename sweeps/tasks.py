"""Celery tasks of sweeps: the driver's act for one sweep, and beat's round over every live sweep."""

from __future__ import annotations

import logging

from celery import shared_task

from sweeps.constants import LIVE_STATES
from sweeps.driver import advance
from sweeps.models import Sweep

logger = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def advance_sweep(sweep_id: int) -> str:
    """One act of the driver for one sweep (:func:`sweeps.driver.advance`): as it is created or stopped."""
    return advance(sweep_id)


@shared_task(ignore_result=True)
def advance_sweeps() -> int:
    """Beat, every ``SLIPWAY_SWEEP_SECONDS``: act for every live sweep (one failing does not stop the others: the
    next round acts for it again). How many were acted for."""
    done = 0
    for pk in Sweep.objects.filter(state__in=LIVE_STATES).order_by("pk").values_list("pk", flat=True):
        try:
            advance(pk)
            done += 1
        except Exception:
            logger.exception("sweeps: acting for sweep %s failed", pk)
    return done
