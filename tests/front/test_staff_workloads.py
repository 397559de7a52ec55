"""The staff list of every team's workloads: filters, sorting, cancel / delete / scale to minimum through the services."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import QuotaHold
from inference.models import InferenceEndpoint
from jobs.models import TrainingRun
from quotas.admission import admit
from quotas.decide import ResourceRequest
from quotas.demo import seed_team_quotas
from teams.models import AuditEvent
from tests.factories import hold_of

pytestmark = pytest.mark.django_db

URL = "/admin/workloads/"


@pytest.fixture
def world(team, other_team, member, outsider, flavors, published):
    seed_team_quotas(team, {"a100-80gb": 8, "l4": 2})
    seed_team_quotas(other_team, {"a100-80gb": 8})
    now = timezone.now()

    def run(team, user, name, flavor, state, hours=0.0):
        created = TrainingRun.objects.create(team=team, created_by=user, name=name, flavor=flavors[flavor], state=state,
                                             image="r.example.com/t:1", command=["python"], gpus_per_worker=2)
        if hours:
            hold_of(created, now - timedelta(hours=hours), 2)
        return created
    cheap = run(team, member, "cheap", "l4", "running", hours=1)
    dear = run(other_team, outsider, "dear", "a100-80gb", "running", hours=1)
    old = run(team, member, "old", "a100-80gb", "succeeded")
    endpoint = InferenceEndpoint.objects.create(team=team, created_by=member, name="chat", flavor=flavors["a100-80gb"],
                                                state="ready", image="r.example.com/s:1", min_replicas=1,
                                                max_replicas=4, replicas=3, replica_ceiling=3)
    admit(team, ResourceRequest("a100-80gb", 3, 1), endpoint.ref)  # minimum 1 + 2 burst replicas
    QuotaHold.objects.held().filter(ref=endpoint.ref).update(billed_until=now, open_units=3)
    return {"cheap": cheap, "dear": dear, "old": old, "endpoint": endpoint}


def listed(client, query="") -> list[str]:
    response = client.get(URL + query)
    assert response.status_code == 200, response.content[:500]
    return re.findall(r'<tr data-ref="([^"]+)">', response.content.decode())


def test_staff_see_every_teams_active_work_newest_first(client, staff, world):
    client.force_login(staff)
    w = world
    assert listed(client) == [w["endpoint"].ref, w["dear"].ref, w["cheap"].ref]  # "old" is finished


def test_staff_filter_by_team_state_flavor_and_user_and_sort_by_cost(client, staff, world, outsider):
    client.force_login(staff)
    w = world
    assert listed(client, "?team=vision&state=active") == [w["dear"].ref]
    assert listed(client, "?state=succeeded") == [w["old"].ref]
    assert listed(client, "?state=&flavor=l4") == [w["cheap"].ref]
    assert listed(client, f"?state=&user={outsider.username}") == [w["dear"].ref]
    # 2 A100s for an hour (8.20) before 2 L4s for an hour (1.60); the endpoint just started.
    assert listed(client, "?state=active&sort=cost") == [w["dear"].ref, w["cheap"].ref, w["endpoint"].ref]


def test_a_bad_filter_is_a_form_error(client, staff, world):
    client.force_login(staff)
    for query in ("?team=nope", "?state=exploded", "?sort=random", "?user=nobody-here"):
        response = client.get(URL + query)
        assert response.status_code == 400, query
        assert "errornote" in response.content.decode()


def test_staff_cancel_a_run_of_any_team_through_the_service(client, staff, world):
    client.force_login(staff)
    dear = world["dear"]
    response = client.post(f"/admin/workloads/run/{dear.pk}/end/", {"next": "/admin/workloads/?team=vision"})
    assert response.status_code == 302 and response["Location"] == "/admin/workloads/?team=vision"
    dear.refresh_from_db()
    assert dear.state == "cancelled"
    assert AuditEvent.objects.filter(action="run_cancelled", actor=staff).exists()
    # Twice: a conflict told in words, nothing changes.
    response = client.post(f"/admin/workloads/run/{dear.pk}/end/", follow=True)
    assert "nothing to cancel" in response.content.decode()


def test_staff_delete_an_endpoint_or_scale_it_to_its_minimum(client, staff, world):
    client.force_login(staff)
    endpoint = world["endpoint"]
    page = client.get(URL).content.decode()
    assert f'href="/admin/workloads/ep/{endpoint.pk}/scale-to-minimum/?next=' in page
    client.post(f"/admin/workloads/ep/{endpoint.pk}/scale-to-minimum/")
    endpoint.refresh_from_db()
    assert endpoint.replica_ceiling == 1
    client.post(f"/admin/workloads/ep/{endpoint.pk}/end/")
    endpoint.refresh_from_db()
    assert endpoint.state == "deleting"


def test_actions_never_redirect_off_site_and_unknown_kinds_are_404(client, staff, world):
    client.force_login(staff)
    response = client.post(f"/admin/workloads/run/{world['cheap'].pk}/end/", {"next": "https://evil.example.com/"})
    assert response["Location"] == "/admin/workloads/"
    assert client.post("/admin/workloads/nb/1/end/").status_code == 404
    assert client.post("/admin/workloads/run/99999/end/").status_code == 404
    assert client.put(f"/admin/workloads/run/{world['cheap'].pk}/end/").status_code == 405
    page = client.get(f"/admin/workloads/run/{world['cheap'].pk}/end/?next=https://evil.example.com/").content.decode()
    assert "evil.example.com" not in page


@pytest.mark.parametrize(("path", "asks"), [
    ("/admin/workloads/run/{cheap}/end/", "Cancel run cheap (#{cheap}) of team ml-research?"),
    ("/admin/workloads/ep/{endpoint}/end/", "Delete endpoint chat (#{endpoint}) of team ml-research?"),
    ("/admin/workloads/ep/{endpoint}/scale-to-minimum/",
     "Scale to minimum endpoint chat (#{endpoint}) of team ml-research?"),
])
def test_each_action_asks_first_and_changes_nothing_until_confirmed(client, staff, world, path, asks):
    client.force_login(staff)
    before = (sorted(TrainingRun.objects.values_list("pk", "state")),
              sorted(InferenceEndpoint.objects.values_list("pk", "state", "replica_ceiling")))
    page = client.get(path.format(cheap=world["cheap"].pk, endpoint=world["endpoint"].pk) + "?next=/admin/workloads/")
    html = page.content.decode()
    assert page.status_code == 200 and asks.format(cheap=world["cheap"].pk, endpoint=world["endpoint"].pk) in html
    assert 'id="confirm-action"' in html and 'name="next" value="/admin/workloads/"' in html
    after = (sorted(TrainingRun.objects.values_list("pk", "state")),
             sorted(InferenceEndpoint.objects.values_list("pk", "state", "replica_ceiling")))
    assert after == before


def test_messages_name_the_workload_and_its_team_as_every_message_does(client, staff, world):
    """Issue 34.7: one way to name a workload, "run dear (#3) of team vision" (never ``vision/dear`` or a ref)."""
    client.force_login(staff)
    html = client.post(f"/admin/workloads/run/{world['dear'].pk}/end/", follow=True).content.decode()
    assert f"Run dear (#{world['dear'].pk}) of team vision cancelled." in html
    html = client.post(f"/admin/workloads/ep/{world['endpoint'].pk}/scale-to-minimum/", follow=True).content.decode()
    assert f"Endpoint chat (#{world['endpoint'].pk}) of team ml-research scaled to its minimum." in html
    assert "ml-research/chat" not in html


# -- every workload, a page at a time ----------------------------------------------------------------


def many_runs(team, user, flavor, count: int) -> list[TrainingRun]:
    """``count`` finished runs, created a minute apart (the last is the newest)."""
    start = timezone.now() - timedelta(days=30)
    runs = TrainingRun.objects.bulk_create(
        TrainingRun(team=team, created_by=user, name=f"r{i}", flavor=flavor, state="succeeded", image="r.example.com/t:1",
                    command=["python"], gpus_per_worker=1) for i in range(count))
    for i, run in enumerate(runs):  # created_at is auto_now_add: set it after
        TrainingRun.objects.filter(pk=run.pk).update(created_at=start + timedelta(minutes=i))
    return runs


def pages_link(html: str, rel: str) -> str:
    found = re.search(rf'<a href="([^"]+)" rel="{rel}">', html)
    return found.group(1).replace("&amp;", "&") if found else ""


def test_staff_page_through_every_workload_past_the_newest_500_keeping_the_filters(client, staff, world, outsider):
    runs = many_runs(world["dear"].team, outsider, world["dear"].flavor, 520)
    client.force_login(staff)
    seen, query = [], "?team=vision&state=succeeded&sort=age"
    while query:
        response = client.get(URL + query)
        html = response.content.decode()
        assert response.status_code == 200 and "520 workloads match" in html
        seen += re.findall(r'<tr data-ref="([^"]+)">', html)
        query = pages_link(html, "next")
        assert not query or ("team=vision" in query and "state=succeeded" in query and "sort=age" in query)
    assert seen == [run.ref for run in reversed(runs)]  # all of them, newest first, each once
    last = [run.ref for run in reversed(runs[:20])]
    assert listed(client, "?team=vision&state=succeeded&page=6") == last
    assert 'rel="prev"' in client.get(URL + "?team=vision&state=succeeded&page=6").content.decode()
    # A page out of range or not a number is the nearest page, never an error.
    assert listed(client, "?team=vision&state=succeeded&page=99") == last
    assert listed(client, "?team=vision&state=succeeded&page=x")[0] == runs[-1].ref


def test_cost_order_runs_across_pages(client, staff, world, outsider):
    runs = many_runs(world["dear"].team, outsider, world["dear"].flavor, 130)
    for i, run in enumerate(runs):
        TrainingRun.objects.filter(pk=run.pk).update(billed_cost=i % 7)
    client.force_login(staff)
    costs = {run.ref: i % 7 for i, run in enumerate(runs)}
    first = listed(client, "?team=vision&state=succeeded&sort=cost")
    second = listed(client, "?team=vision&state=succeeded&sort=cost&page=2")
    order = [costs[ref] for ref in first + second]
    assert len(first) == 100 and len(set(first + second)) == 130 and order == sorted(order, reverse=True)


@pytest.mark.parametrize("count", [3, 130])
def test_the_list_costs_the_same_queries_at_any_size_and_page(client, staff, world, outsider, count,
                                                               django_assert_num_queries):
    many_runs(world["dear"].team, outsider, world["dear"].flavor, count)
    client.force_login(staff)
    # session + user (2) + the filter form's teams and flavors (2) + flavors' prices (1) + one
    # narrow read of the one Workload table, whatever the kinds + the holds' open segments (1) + the
    # page's rows of each kind on it (2: runs and the endpoint) + their holds (1) + the staff member's
    # memberships for the navigation (1) + the rows' one price book (2: clusters, cluster prices; billing.pricing)
    with django_assert_num_queries(13):
        response = client.get(URL + "?state=&sort=cost")
    assert response.status_code == 200 and len(listed(client, "?state=&sort=cost")) == min(count + 4, 100)
    if count > 100:  # the last page: the same reads (only runs are on it)
        with django_assert_num_queries(12):
            assert len(listed(client, "?state=&sort=cost&page=2")) == count + 4 - 100


@pytest.mark.parametrize("count", [3, 130])
def test_newest_first_is_paged_in_sql_at_any_size(client, staff, world, outsider, count, django_assert_num_queries):
    many_runs(world["dear"].team, outsider, world["dear"].flavor, count)
    client.force_login(staff)
    # session + user (2) + the filter form's teams and flavors (2) + the matching count and this
    # page's keys, one query of the one Workload table each (2) + the page's rows of each kind on it (2: the
    # newest are the world's runs and endpoint) + their holds (1) + the staff member's memberships (1)
    # + the rows' one price book (2: clusters, cluster prices)
    with django_assert_num_queries(12):
        assert len(listed(client, "?state=")) == min(count + 4, 100)
    if count > 100:  # the last page holds the oldest runs only
        with django_assert_num_queries(11):
            assert len(listed(client, "?state=&page=2")) == count + 4 - 100


def test_each_row_names_its_workload_as_messages_do_with_a_link_never_the_raw_ref(client, staff, world):
    """Issue 46 F.9: "run cheap (#12)" with the team in its column, as "run cheap (#12) of team ml-research"
    reads in every message; the ``run:12`` ref stays a machine field (``data-ref``), not text people read."""
    client.force_login(staff)
    page = client.get(URL).content.decode()
    for workload, noun in ((world["cheap"], "run"), (world["endpoint"], "endpoint")):
        row = re.search(rf'<tr data-ref="{workload.ref}">(.*?)</tr>', page, re.S).group(1)
        header = re.search(r'<th scope="row">(.*?)</th>', row, re.S).group(1)
        assert header == (f'{noun} <a href="{workload.get_absolute_url()}">{workload.name}</a> '
                          f'<span class="quiet">(#{workload.pk})</span>')
        assert workload.team.name in row
    text = re.sub(r"<[^>]+>", " ", page)
    assert world["cheap"].ref not in text and world["endpoint"].ref not in text
