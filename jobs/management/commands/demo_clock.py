"""``manage.py demo_clock hold|start``: when the demo's later runs come (README "Watch a reclaim").

``seed_demo`` schedules NLP's t5-distill two minutes after seeding. ``scripts/run.sh`` seeds before it
starts the services, which on a cold start can take longer than the story itself, so it holds the
later runs (``hold``, before the services start) and starts their clock once the portal first answers
(``start``), which prints when each comes: the README's minutes count from then.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from jobs.demo import hold_later_demo_runs, later_demo_run_line, start_later_demo_runs


class Command(BaseCommand):
    help = ("hold: keep the demo's later runs from coming due; start: make each due its delay from now "
            "(scripts/run.sh, once the portal answers) and print when.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["hold", "start"])

    def handle(self, *args, action: str, **options) -> None:
        if action == "hold":
            hold_later_demo_runs()
            return
        for row in start_later_demo_runs():
            self.stdout.write(f"  {later_demo_run_line(row)} (the demo's reclaim: README \"Watch a reclaim\").")
