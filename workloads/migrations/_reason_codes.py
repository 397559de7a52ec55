"""The one-time derivation of ``reason_code`` from the words of ``reason``, for rows written before the code.

Used by each workload kind's data migration (``jobs``, ``inference``, the test kind). The words
are frozen here as they stood when the code column was added — a migration must not follow
later edits of the messages — and this is the only code that ever reads them to decide
anything. Not a migration itself (the loader skips modules whose names start with ``_``).
"""

from __future__ import annotations

#: (code, how the words begin), first match wins; then the queued state, then the cluster's words.
_PREFIXES = (
    ("waiting_for_capacity", "waiting for capacity"),
    ("waiting_for_worker", "admitted; waiting for a worker"),
    ("submitted", "submitted to the cluster"),
    ("ended_by_user", "cancelled by "),
    ("ended_by_user", "deleted by "),
    ("stopped_by_budget", "stopped: the team's monthly budget is spent"),
    ("burst_capped", "capped at "),
    ("cluster_rejected", "the cluster rejected the "),
    ("cluster_unreachable", "the cluster could not be reached after "),
)
_VANISHED = "cluster objects disappeared"


def code_of(reason: str, state: str) -> str:
    """The code the words of ``reason`` (of a workload in ``state``) stand for."""
    if not reason:
        return ""
    for code, prefix in _PREFIXES:
        if reason.startswith(prefix):
            return code
    if _VANISHED in reason:
        return "objects_vanished"
    if state == "queued":
        return "queued"
    return "cluster"


def derive(app_label: str, model_name: str):
    """A ``RunPython`` function setting every row's code from its words (one UPDATE per distinct code)."""

    def forward(apps, schema_editor) -> None:
        model = apps.get_model(app_label, model_name)
        by_code: dict[str, list[int]] = {}
        for pk, reason, state in model.objects.exclude(reason="").values_list("pk", "reason", "state").iterator():
            by_code.setdefault(code_of(reason, state), []).append(pk)
        for code, pks in by_code.items():
            for first in range(0, len(pks), 1000):
                model.objects.filter(pk__in=pks[first:first + 1000]).update(reason_code=code)

    return forward
