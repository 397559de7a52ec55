"""The "Which flavor?" page (/help/flavors/, issue 37 item 5): the sharing advice and the flavors offered.

Anyone signed in reads it, with a team or without (the flavors are what ``GET /api/v1/flavors/`` lists);
htmx gets the flavors table alone; GET only.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.models import GpuFlavor
from tests.factories import make_user
from tests.shared_flavors import make_shared_flavors

pytestmark = pytest.mark.django_db

URL = "/help/flavors/"


@pytest.fixture
def shared(flavors):
    return make_shared_flavors()


def test_it_shows_the_advice_and_each_flavors_sharing_isolation_memory_and_price(client, member, shared):
    client.force_login(member)
    response = client.get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert "<h1>Which flavor?</h1>" in html and 'id="sharing-guide"' in html
    for sharing in ("none", "mig", "time-slicing", "mps"):
        assert f'id="guide-{sharing}"' in html
    assert "training that needs the whole GPU memory" in html  # time-slicing's "not for"
    assert "concurrent small jobs of one team" in html  # MPS's "good for"
    t4 = html[html.index('id="flavor-t4-ts4"'):]
    t4 = t4[:t4.index("</tr>")]
    for words in ("Tesla-T4", "Time-sliced &times;4", "<td>none</td>", "16 GB shared", "<td>no</td>", "0.10 USD/h"):
        assert words in t4, words
    mps = html[html.index('id="flavor-a10g-mps2"'):]
    mps = mps[:mps.index("</tr>")]
    for words in ("MPS &times;2", "<td>partial</td>", "12 GB own", "yes, 1 worker, 1 unit", "0.50 USD/h"):
        assert words in mps, words


def test_it_lists_only_flavors_that_may_be_requested(client, member, shared):
    GpuFlavor.objects.filter(name="t4-ts4").update(active=False)
    client.force_login(member)
    html = client.get(URL).content.decode()
    assert 'id="flavor-t4-ts4"' not in html and 'id="flavor-a10g-mps2"' in html


def test_a_user_without_a_team_reads_it_too(client, shared):
    client.force_login(make_user("newcomer"))
    response = client.get(URL)
    assert response.status_code == 200 and 'id="flavor-t4-ts4"' in response.content.decode()


def test_an_outsider_of_every_team_reads_the_same_page(client, outsider, shared):
    client.force_login(outsider)
    assert 'id="flavor-a10g-mps2"' in client.get(URL).content.decode()


def test_htmx_gets_the_flavors_table_alone(client, member, shared):
    client.force_login(member)
    response = client.get(URL, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200 and 'id="flavor-table"' in html
    assert "<html" not in html and 'id="sharing-guide"' not in html
    assert response["Vary"] and "HX-Request" in response["Vary"]


def test_anonymous_users_are_asked_to_sign_in_and_only_get_is_answered(client, member):
    response = client.get(URL)
    assert response.status_code == 302 and "/login/" in response["Location"]
    client.force_login(member)
    assert client.post(URL).status_code == 405


def test_it_reads_in_a_constant_number_of_queries(client, member, flavors):
    client.force_login(member)
    client.get(URL)  # warm the session and the caches

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(URL).status_code == 200
        return len(captured)

    few = queries()
    make_shared_flavors()
    assert queries() == few
