"""App config for workspaces: registers GPU notebook workspaces as a workload kind."""

from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "workspaces"
    verbose_name = "Workspaces"

    def ready(self) -> None:
        # Imported here, not at the top: models may only be imported once apps are loaded.
        from django.db.models.signals import post_delete

        from teams.events import membership_changed
        from teams.models import Membership
        from workloads.registry import register
        from workspaces import checks  # noqa: F401  (registers the system checks)
        from workspaces.kind import WorkspaceKind
        from workspaces.services import member_changed, member_left

        register(WorkspaceKind())
        # A member who leaves the team, or whose membership moves or loses the admin role, must not keep a way
        # into the workspaces they could open.
        post_delete.connect(member_left, sender=Membership, dispatch_uid="workspaces.member_left")
        membership_changed.connect(member_changed, sender=Membership, dispatch_uid="workspaces.member_changed")
