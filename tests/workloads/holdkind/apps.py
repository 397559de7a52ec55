"""A test-only workload kind without cluster objects: proof that work which only holds units goes through the
shared machinery — admission, placement, the cycle, billing, budgets and its end — with no pods at all.

Installed only by ``tests/settings.py``, beside the notebook kind (``tests/workloads/tinykind``). It is the
shape of the calendar reservations to come; its model and status mapping live here and it registers
through :func:`workloads.registry.register` like any kind.
"""

from django.apps import AppConfig


class HoldKindConfig(AppConfig):
    name = "tests.workloads.holdkind"
    label = "holdkind"

    def ready(self) -> None:
        # Imported here, not at the top: models may only be imported once apps are loaded.
        from tests.workloads.holdkind.kind import BlockKind
        from workloads.registry import register

        register(BlockKind())
