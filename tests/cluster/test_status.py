"""cluster.status: what every kind's status mapping reads off observed objects.

The mappings themselves are tested where they live: a Deployment's in test_deployments.py, a run's in
tests/jobs/test_status.py, an endpoint's in tests/inference/test_status.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from cluster.status import parse_time


@pytest.mark.parametrize("value", [None, "", "yesterday", 12])
def test_it_reads_missing_or_odd_timestamps_as_none(value: Any) -> None:
    assert parse_time(value) is None
