"""App config for workloads: connects the receivers and feeds open segments, commitments and workload names to the ledger."""

from __future__ import annotations

from django.apps import AppConfig


class WorkloadsConfig(AppConfig):
    name = "workloads"
    verbose_name = "Workloads"

    def ready(self) -> None:
        # Imported here, not at the top: models may only be imported once apps are loaded.
        from quotas.ledger import (
            register_commitments,
            register_kind_nouns,
            register_open_groups,
            register_open_segments,
            register_ref_labels,
        )
        from workloads import checks, signals  # noqa: F401  (registers the system checks, connects receivers)
        from workloads.billing import commitments, open_groups, open_segments
        from workloads.registry import kind_nouns, labels

        register_open_segments(open_segments)
        register_open_groups(open_groups)
        register_commitments(commitments)
        register_ref_labels(labels)
        register_kind_nouns(kind_nouns)
