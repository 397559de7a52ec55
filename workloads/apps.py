"""App config for workloads: connects the receivers and feeds workload names to the ledger's reports."""

from __future__ import annotations

from django.apps import AppConfig


class WorkloadsConfig(AppConfig):
    name = "workloads"
    verbose_name = "Workloads"

    def ready(self) -> None:
        # Imported here, not at the top: models may only be imported once apps are loaded.
        from billing.ledger import register_kind_nouns, register_ref_labels
        from workloads import checks, receivers  # noqa: F401  (registers the system checks, connects receivers)
        from workloads.registry import kind_nouns, labels

        register_ref_labels(labels)
        register_kind_nouns(kind_nouns)
