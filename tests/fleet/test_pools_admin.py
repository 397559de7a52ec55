"""Elastic pools in the admin console (issue 52): an inline of the cluster's page, what each pool has now
read-only, min ≤ max, and every save audited through the one service."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from django.utils import timezone

import fleet.services as fleet
from fleet.models import MAX_NODES, Cluster, NodePool
from teams.models import AuditEvent
from tests.fleet.conftest import node
from tests.fleet.test_clusters import edit_form

pytestmark = pytest.mark.django_db


def row(i: int, flavor, pool: NodePool | None = None, **values) -> dict:
    """One row of the pools inline as the browser posts it."""
    fields = {"flavor": flavor.pk, "min_nodes": 0, "max_nodes": 4, "mode": "atomic", "unneeded_minutes": 10}
    if pool is not None:
        fields.update(id=pool.pk, flavor=pool.flavor_id, min_nodes=pool.min_nodes, max_nodes=pool.max_nodes,
                      mode=pool.mode, unneeded_minutes=pool.unneeded_minutes)
    fields.update(values)
    return {f"pools-{i}-{k}": "" if v is None else str(v) for k, v in fields.items()}


def post(client, cluster: Cluster, rows: list[dict], initial: int):
    form = {**edit_form(cluster), "pools-TOTAL_FORMS": str(len(rows)), "pools-INITIAL_FORMS": str(initial)}
    for one in rows:
        form.update(one)
    return client.post(f"/admin/fleet/cluster/{cluster.pk}/change/", form)


def pool_events():
    return [(e.details["pool"], e.details["change"]) for e in
            AuditEvent.objects.filter(action=AuditEvent.Action.CLUSTER_CHANGED).order_by("pk") if "pool" in e.details]


def test_the_clusters_page_shows_its_pools_with_what_they_have_now(clusters, flavors, staff_client):
    east = Cluster.objects.get(name="east")
    a100 = flavors["a100-80gb"]
    fleet.record_nodes(east, [node("east-a100-0", a100, free=2), node("east-a100-1", a100, free=8),
                              replace(node("east-a100-2", a100, free=8), provisioning=True)], timezone.now())
    NodePool.objects.create(cluster=east, flavor=a100, min_nodes=1, max_nodes=6, history_seconds=[200, 220, 400])
    page = staff_client.get(f"/admin/fleet/cluster/{east.pk}/change/").content.decode()
    assert 'name="pools-0-max_nodes"' in page and 'value="6"' in page
    assert re.search(r'class="field-nodes_ready">\s*<p>2</p>', page)
    assert re.search(r'class="field-nodes_provisioning">\s*<p>1</p>', page)
    assert "220 s, 400 s (3 observed)" in page
    assert 'name="pools-0-nodes_ready"' not in page  # read-only


def test_the_page_and_the_api_say_a_pools_provisioning_time_alike_a_half_up(clusters, flavors, staff_client):
    """One figure, two places: the API's provisioning_seconds and the page's column, whole seconds, a half up
    (round() made 220.5 s 220 and 401.5 s 402)."""
    east = Cluster.objects.get(name="east")
    NodePool.objects.create(cluster=east, flavor=flavors["a100-80gb"], min_nodes=0, max_nodes=6,
                            history_seconds=[200.0, 220.5, 401.5])
    page = staff_client.get(f"/admin/fleet/cluster/{east.pk}/change/").content.decode()
    listed = staff_client.get("/api/v1/clusters/east/").json()["pools"][0]["provisioning_seconds"]
    assert "221 s, 402 s (3 observed)" in page
    assert listed == {"median": 221, "tail": 402, "observed": 3}


def test_staff_add_change_and_remove_pools_in_the_inline_each_audited(clusters, flavors, staff_client):
    east = Cluster.objects.get(name="east")
    a100, l4 = flavors["a100-80gb"], flavors["l4"]
    response = post(staff_client, east, [row(0, a100, max_nodes=4), row(1, l4, min_nodes=1, max_nodes=2, mode="any")],
                    initial=0)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert sorted(NodePool.objects.values_list("flavor__name", "min_nodes", "max_nodes", "mode")) == [
        ("a100-80gb", 0, 4, "atomic"), ("l4", 1, 2, "any")]
    assert sorted(pool_events()) == [("a100-80gb", "pool created"), ("l4", "pool created")]
    a100_pool, l4_pool = NodePool.objects.get(flavor=a100), NodePool.objects.get(flavor=l4)
    response = post(staff_client, east, [row(0, a100, a100_pool, max_nodes=8, unneeded_minutes=30),
                                         row(1, l4, l4_pool, DELETE="on")], initial=2)
    assert response.status_code == 302
    assert list(NodePool.objects.values_list("flavor__name", "max_nodes", "unneeded_minutes")) == [
        ("a100-80gb", 8, 30)]
    assert pool_events()[2:] == [("l4", "pool removed"), ("a100-80gb", "pool changed")]
    changed = AuditEvent.objects.filter(action=AuditEvent.Action.CLUSTER_CHANGED).order_by("pk").last()
    assert (changed.details["max_nodes"], changed.details["unneeded_minutes"]) == (8, 30)
    assert "min_nodes" not in changed.details  # only what changed


@pytest.mark.parametrize(("values", "words"), [
    ({"min_nodes": 5, "max_nodes": 4}, "The minimum is more than the maximum."),
    ({"max_nodes": 0}, "Ensure this value is greater than or equal to 1."),
    ({"max_nodes": MAX_NODES + 1}, f"At most {MAX_NODES} nodes."),
    ({"unneeded_minutes": 1441}, "Ensure this value is less than or equal to 1440."),
])
def test_a_bad_pool_is_a_form_error_and_nothing_is_saved(clusters, flavors, staff_client, values, words):
    east = Cluster.objects.get(name="east")
    response = post(staff_client, east, [row(0, flavors["a100-80gb"], **values)], initial=0)
    assert response.status_code == 200
    assert words in response.content.decode()
    assert not NodePool.objects.exists() and pool_events() == []


def cells(page: str, table: str, key: str, value: str) -> dict[str, str]:
    """The cells of the row of ``table`` whose ``data-<key>`` is ``value``, by their class, as text."""
    body = page[page.index(f'<table id="{table}">'):]
    line = body[body.index(f'data-{key}="{value}"'):body.index("</tr>", body.index(f'data-{key}="{value}"'))]
    return {m[0]: re.sub(r"<[^>]+>", "", m[1]).strip() for m in re.findall(r'<td class="([\w-]+)">(.*?)</td>', line)}


def test_the_capacity_page_shows_each_pool_and_never_counts_its_room_as_ready_or_in_use(clusters, flavors, quota,
                                                                                       staff_client):
    """east: a ready A100 node (6 of 8 in use) and one provisioning; its pool may hold 4, so it may add 2 more."""
    a100 = flavors["a100-80gb"]
    clusters["east"].nodes.append(replace(node("east-a100-1", a100, free=8), provisioning=True))
    east = Cluster.objects.get(name="east")
    NodePool.objects.create(cluster=east, flavor=a100, min_nodes=1, max_nodes=4, mode="any", unneeded_minutes=15)
    page = staff_client.get("/admin/capacity/").content.decode()
    assert cells(page, "pools", "pool", "a100-80gb") == {
        "cluster": "east", "mode": "any", "min": "1", "max": "4 (32)", "ready": "1", "provisioning": "1",
        "may-add": "2"}
    flavor = cells(page, "capacity", "flavor", "a100-80gb")
    # Ready: east's one node and west's (8 each); provisioning: 8; the pool's room: 2 nodes of 8. Quota: 8 of the 40
    # the clusters may ever hold.
    assert (flavor["allocatable"], flavor["provisioning"], flavor["may-add"], flavor["overcommit"]) == (
        "16", "8", "16", "0.2×")
    assert 'data-node="east-a100-1" data-cluster="east" class="provisioning"' in page
    assert "east-a100-1 <span class=\"quiet\">(provisioning)</span>" in page
    assert "-pool+" not in page  # the room is counted, never listed as a node
    # A lost cluster is not asked: its pool shows its nodes as last read.
    fleet.record_nodes(east, clusters["east"].nodes, timezone.now())
    Cluster.objects.filter(pk=east.pk).update(health="lost", silent_since=timezone.now())
    page = staff_client.get("/admin/capacity/").content.decode()
    assert cells(page, "pools", "pool", "a100-80gb")["ready"] == "1" and "(nodes as last read)" in page
