"""``GET /api/v1/usage/`` with dates at the calendar's edges.

``until=9999-12-31`` means "to the end of that day", i.e. the next midnight, which Python's
``datetime`` cannot hold (OverflowError, a 500). The OpenAPI schema calls any RFC 3339 date valid,
so such a date is read as the nearest year the report can hold (no usage lies beyond it): a 200.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("query", ["until=9999-12-31", "since=2026-01-01&until=9999-12-31",
                                   "since=0001-01-01T00:00:00%2B05:00", "since=0001-01-01&until=9999-12-31T23:59:59-05:00"])
def test_it_reads_a_date_at_the_calendars_edge_as_the_nearest_bound(api, team, query):
    response = api.get(f"/api/v1/usage/?{query}")
    assert response.status_code == 200, response.content
    assert response.json()["results"] == []  # no usage recorded: a page, not an error


@pytest.mark.parametrize("query", ["team=", "since=", "until=", "group_by=", "format=", "since=2026-13-01"])
def test_it_answers_400_for_an_empty_or_malformed_parameter(api, team, query):
    response = api.get(f"/api/v1/usage/?{query}")
    assert response.status_code == 400
    assert query.split("=")[0] in response.json()["errors"]
