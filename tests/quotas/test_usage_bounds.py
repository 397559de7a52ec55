"""``GET /api/v1/usage/`` with dates at the calendar's edges.

``until=9999-12-31`` means "to the end of that day", i.e. the next midnight, which Python's
``datetime`` cannot hold: it must be a 400 on the field, not a 500 (OverflowError).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("query", ["until=9999-12-31", "since=2026-01-01&until=9999-12-31"])
def test_it_answers_400_not_500_for_a_date_past_the_calendar(api, team, query):
    response = api.get(f"/api/v1/usage/?{query}")
    assert response.status_code == 400
    assert "until" in response.json()["errors"]
