"""A test-only workload kind: proof that a new kind needs nothing outside its own app.

Installed only by ``tests/settings.py``. Its model, builder and status mapping live here and
it registers through :func:`workloads.registry.register`, like ``jobs`` does.
"""

from django.apps import AppConfig


class TinyKindConfig(AppConfig):
    name = "tests.workloads.tinykind"
    label = "tinykind"

    def ready(self) -> None:
        # Imported here, not at the top: models may only be imported once apps are loaded.
        from tests.workloads.tinykind.kind import NotebookKind
        from workloads.registry import register

        register(NotebookKind())
