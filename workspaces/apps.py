"""App config for workspaces: registers GPU notebook workspaces as a workload kind."""

from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "workspaces"
    verbose_name = "Workspaces"

    def ready(self) -> None:
        # Imported here, not at the top: models may only be imported once apps are loaded.
        from workloads.registry import register
        from workspaces.kind import WorkspaceKind

        register(WorkspaceKind())
