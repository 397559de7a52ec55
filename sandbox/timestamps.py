"""Timestamps as Kubernetes writes them in statuses and events (RFC 3339, whole seconds, UTC)."""

from __future__ import annotations

from datetime import datetime


def rfc3339(t: datetime | None) -> str | None:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ") if t else None


def parse_rfc3339(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
