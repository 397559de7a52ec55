"""App config of teams."""

from django.apps import AppConfig


class TeamsConfig(AppConfig):
    name = "teams"
    # The label of the app these models were born in: their tables (portal_team …), migration
    # history, permissions and admin URLs (/admin/portal/team/) stay as they are. Renaming it would
    # rename all of those in every database for no change in behaviour (docs/glossary.md "portal").
    label = "portal"
    verbose_name = "Teams and access"

    def ready(self) -> None:
        # Connect the sign-in audit and group sync receivers at start-up, not on first URL resolution;
        # register the group map's system check.
        from teams import checks, signals  # noqa: F401
