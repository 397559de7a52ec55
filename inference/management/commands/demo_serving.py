"""``manage.py demo_serving --key-file PATH``: the demo endpoint's key and its canary (:func:`inference.demo.seed_demo_serving`).

``make run`` runs it after ``seed_demo`` and hands the key file to ``manage.py serving_load``.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandParser

from inference.demo import seed_demo_serving


class Command(BaseCommand):
    help = "Give the demo endpoint an API key (written to --key-file) and a canary that the rule rolls back."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--key-file", required=True, help="where the demo key is kept (0600)")

    def handle(self, *args, **options) -> None:
        for line in seed_demo_serving(Path(options["key_file"])):
            self.stdout.write(line)
