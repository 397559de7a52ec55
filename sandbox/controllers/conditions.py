"""Status conditions of Jobs, PyTorchJobs and TrainJobs: built, replaced and looked up as their controllers do."""

from __future__ import annotations

from datetime import datetime

from sandbox.timestamps import rfc3339


def condition(type_: str, reason: str, message: str, now: datetime, status: str = "True") -> dict:
    stamp = rfc3339(now)
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastProbeTime": stamp, "lastTransitionTime": stamp}


def has_condition(conditions: list[dict], type_: str) -> bool:
    return any(c["type"] == type_ and c["status"] == "True" for c in conditions)


def set_condition(conditions: list[dict], type_: str, status: str, reason: str, message: str,
                  now: datetime) -> list[dict]:
    """The conditions with ``type_`` set; its transition time holds while its status does."""
    out = [c for c in conditions if c["type"] != type_]
    existing = next((c for c in conditions if c["type"] == type_), None)
    if existing is None and status == "False":
        return out
    cond = condition(type_, reason, message, now, status)
    if existing and existing["status"] == status:
        cond["lastTransitionTime"] = existing.get("lastTransitionTime", cond["lastTransitionTime"])
    out.append(cond)
    return out
