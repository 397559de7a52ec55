"""Template context shared by every page: the current team and the user's teams."""

from __future__ import annotations

from django.conf import settings


def slipway(request) -> dict:
    membership = getattr(request, "membership", None)
    # SimpleLazyObject wrapping None is truthy; unwrap by attribute access.
    current = membership if membership is not None and getattr(membership, "pk", None) else None
    return {
        "current_membership": current,
        "current_team": current.team if current else None,
        "cluster_backend": settings.SLIPWAY_CLUSTER_BACKEND,
        "currency": settings.SLIPWAY_CURRENCY,
    }
