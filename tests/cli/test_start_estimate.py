"""The start estimate in the command line says what the page and the API say (issue 46): one function
(``workloads.estimates.forecast.StartEstimate.words``) words it for ``slipway describe`` and ``slipway run --dry-run``."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from tests.cli.test_cli import write
from tests.jobs.conftest import run_payload
from tests.workloads.test_start_range import page_words, short_runs_platform

pytestmark = pytest.mark.django_db(transaction=True)


def test_describe_and_a_dry_run_say_the_pages_start_estimate(cli, member, team, flavors, client, api, tmp_path):
    _busy, waiting = short_runs_platform(member, team, flavors, timezone.now())
    words = api.get(f"/api/v1/runs/{waiting.pk}/").json()["start_estimate"]
    assert words.startswith("starts in 3–30 min, when busy ends, by ") and words.endswith(" at the latest")
    assert page_words(client, member, waiting) == words
    described = cli("describe", str(waiting.pk))
    assert described.exit_code == 0, described.output
    assert re.search(rf"^Estimated start: +{re.escape(words)}$", described.stdout, re.M), described.stdout
    # A dry run of the same request waits behind it for the same end: the same words, the server's.
    spec = write(tmp_path / "spec.yaml", run_payload(name="dry", gpus_per_worker=2, max_runtime_minutes=30))
    dry = cli("run", "-f", spec, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert re.search(rf"^Estimated start: +{re.escape(words)}$", dry.stdout, re.M), dry.stdout
