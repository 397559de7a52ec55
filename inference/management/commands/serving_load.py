"""``manage.py serving_load``: live traffic for an endpoint through the gateway (the demo's; :mod:`inference.load`)."""

from __future__ import annotations

import asyncio
import os
import signal

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from inference.load import LoadGenerator
from inference.models import external_url


class Command(BaseCommand):
    help = ("Send Poisson-timed chat completions (some streamed) to an endpoint through the gateway, with a key; "
            "a line of counts a minute; stops on SIGTERM or Ctrl-C.")
    #: A client of the gateway: it reads no database, so it waits for no check of the portal's.
    requires_system_checks: list = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--gateway", default="", help="the gateway's base URL (default: SLIPWAY_GATEWAY_URL)")
        key = parser.add_mutually_exclusive_group(required=True)
        key.add_argument("--key", help="an API key of the endpoint or its team (sw-...)")
        key.add_argument("--key-file", help="a file holding the key (kept out of the process list; make run's)")
        parser.add_argument("--endpoint", required=True, metavar="TEAM/NAME", help="the endpoint, as in its URL")
        parser.add_argument("--rate", type=float, default=2.0, help="requests a second, on average (default 2)")
        parser.add_argument("--stream-share", type=float, default=0.3,
                            help="the share of requests streamed, 0 to 1 (default 0.3)")
        parser.add_argument("--duration", type=float, default=0, help="seconds to run (default 0: until stopped)")
        parser.add_argument("--model", default="", help="the model to ask for (default: the first /v1/models lists)")
        parser.add_argument("--report-every", type=float, default=60, help="seconds between two lines (default 60)")
        parser.add_argument("--max-in-flight", type=int, default=200,
                            help="open requests at most; arrivals beyond are skipped (default 200)")

    def handle(self, *args, **options) -> None:
        team, slash, name = options["endpoint"].strip("/").partition("/")
        if not (team and slash and name) or "/" in name:
            raise CommandError("--endpoint is TEAM/NAME, e.g. ml-research/chat")
        if options["rate"] <= 0 or not 0 <= options["stream_share"] <= 1 or options["duration"] < 0 \
                or options["report_every"] <= 0 or options["max_in_flight"] < 1:
            raise CommandError("--rate and --report-every must be positive, --stream-share within 0..1, "
                               "--duration 0 or more, --max-in-flight 1 or more")
        gateway = (options["gateway"] or settings.SLIPWAY_GATEWAY_URL).rstrip("/")
        if not gateway.startswith(("http://", "https://")):
            raise CommandError(f"--gateway must be an http(s) URL, not {gateway!r}")
        url = external_url(team, name, gateway)
        key = options["key"]
        if options["key_file"]:
            try:
                with open(options["key_file"]) as file:
                    key = file.read().strip()
            except OSError as exc:
                raise CommandError(f"--key-file {options['key_file']}: {exc.strerror}") from None
        if not key:
            raise CommandError("the key is empty")
        generator = LoadGenerator(url, key, rate=options["rate"], stream_share=options["stream_share"],
                                  model=options["model"], max_in_flight=options["max_in_flight"],
                                  report_every=options["report_every"], log=self._log)
        asyncio.run(self._run(generator, options["duration"]))
        if getattr(self, "_called_from_command_line", False):
            # Stopped means stopped: the session is closed and the last line written, nothing is left to
            # flush; tearing down the ~1,800 modules Django loaded took 0.7 to 2.7 s on a busy 2-core machine.
            self.stdout.flush()
            os._exit(0)

    async def _run(self, generator: LoadGenerator, duration: float) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await generator.run(stop, duration)

    def _log(self, line: str) -> None:
        self.stdout.write(f"serving_load: {line}")
        self.stdout.flush()
