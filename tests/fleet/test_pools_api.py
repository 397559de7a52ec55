"""Elastic pools in the clusters API (issue 52, docs/api.md "Clusters"): the list's ``pools``, staff's PATCH of
them, every field error, who may, the audit, and nothing half-written."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.utils import timezone

import fleet.services as fleet
from fleet.models import MAX_NODES, Cluster, NodePool
from fleet.pools import set_pool
from teams.models import AuditEvent
from tests.factories import make_user
from tests.fleet.conftest import node

pytestmark = pytest.mark.django_db
CONTRACT = {"flavor", "min", "max", "mode", "nodes_ready", "nodes_provisioning", "unneeded_minutes"}


@pytest.fixture
def east(clusters, flavors):
    """east as last read: one ready A100 node (6 of 8 in use) and one still provisioning."""
    cluster = Cluster.objects.get(name="east")
    a100 = flavors["a100-80gb"]
    fleet.record_nodes(cluster, [node("east-a100-0", a100, free=2),
                                 replace(node("east-a100-1", a100, free=8), provisioning=True)], timezone.now())
    return cluster


def patch(client, name: str, body: dict):
    return client.patch(f"/api/v1/clusters/{name}/", body, format="json")


def test_the_list_gives_each_clusters_pools_with_the_contracts_fields(east, flavors, staff, api_client_for):
    NodePool.objects.create(cluster=east, flavor=flavors["a100-80gb"], min_nodes=1, max_nodes=4, mode="atomic")
    listed = {c["name"]: c for c in api_client_for(staff).get("/api/v1/clusters/").json()}
    assert listed["west"]["pools"] == []  # a fixed inventory
    (pool,) = listed["east"]["pools"]
    assert set(pool) >= CONTRACT
    assert {k: pool[k] for k in CONTRACT} == {"flavor": "a100-80gb", "min": 1, "max": 4, "mode": "atomic",
                                              "nodes_ready": 1, "nodes_provisioning": 1, "unneeded_minutes": 10}
    assert pool["provisioning_seconds"] == {"median": 240, "tail": 600, "observed": 0}  # the defaults, no history
    assert pool["autoscaler_limit"] is None
    # The flavor's capacity counts what the pool can ever hold (4 nodes of 8); free, what could start now: the ready
    # node's 2 (the provisioning node and the pool's room run nothing yet).
    assert listed["east"]["flavors"][0] | {"price_per_hour": None} == {
        "flavor": "a100-80gb", "capacity": 32, "free": 2, "price_per_hour": None}
    one = api_client_for(staff).get("/api/v1/clusters/east/").json()
    assert one["pools"] == listed["east"]["pools"]


def test_staff_create_change_and_remove_a_pool_each_audited(east, flavors, staff, api_client_for):
    client = api_client_for(staff)
    created = patch(client, "east", {"pools": [{"flavor": "a100-80gb", "max": 4}, {"flavor": "l4", "max": 2}]})
    assert created.status_code == 200, created.json()
    pools = {p["flavor"]: p for p in created.json()["pools"]}
    assert (pools["a100-80gb"]["min"], pools["a100-80gb"]["mode"], pools["a100-80gb"]["unneeded_minutes"]) == (
        0, "atomic", 10)  # a new pool's defaults
    assert pools["l4"]["nodes_ready"] == 0  # no node offers l4 yet: a pool may start at 0 nodes
    changed = patch(client, "east", {"pools": [{"flavor": "a100-80gb", "min": 2, "max": 6, "mode": "any",
                                                "unneeded_minutes": 30}]})
    assert changed.status_code == 200
    pool = NodePool.objects.get(cluster=east, flavor__name="a100-80gb")
    assert (pool.min_nodes, pool.max_nodes, pool.mode, pool.unneeded_minutes) == (2, 6, "any", 30)
    assert patch(client, "east", {"pools": [{"flavor": "l4", "remove": True}]}).status_code == 200
    assert list(NodePool.objects.filter(cluster=east).values_list("flavor__name", flat=True)) == ["a100-80gb"]
    assert patch(client, "east", {"pools": [{"flavor": "l4", "remove": True}]}).status_code == 200  # idempotent
    events = AuditEvent.objects.filter(action=AuditEvent.Action.CLUSTER_CHANGED, target="cluster:east", actor=staff)
    details = [e.details for e in events.order_by("pk")]
    assert [(d["pool"], d["change"]) for d in details] == [
        ("a100-80gb", "pool created"), ("l4", "pool created"), ("a100-80gb", "pool changed"), ("l4", "pool removed")]
    assert details[2] | {} == {"pool": "a100-80gb", "change": "pool changed", "min_nodes": 2, "max_nodes": 6,
                               "mode": "any", "unneeded_minutes": 30}
    # The same values again change nothing and audit nothing.
    assert patch(client, "east", {"pools": [{"flavor": "a100-80gb", "min": 2, "max": 6}]}).status_code == 200
    assert events.count() == 4


@pytest.mark.parametrize(("item", "field", "words"), [
    ({"flavor": "ghost", "max": 2}, "pools[0].flavor", "Unknown flavor 'ghost'."),
    ({"flavor": "a100-80gb", "min": 5, "max": 4}, "pools[0].min", "The minimum (5) is more than the maximum (4)."),
    ({"flavor": "a100-80gb", "max": 0}, "pools[0].max", "greater than or equal to 1"),
    ({"flavor": "a100-80gb", "max": MAX_NODES + 1}, "pools[0].max", f"less than or equal to {MAX_NODES}"),
    ({"flavor": "a100-80gb"}, "pools[0].max", "Required: the most nodes the pool may have."),
    ({"flavor": "a100-80gb", "max": "4"}, "pools[0].max", "A valid integer is required."),
    ({"flavor": "a100-80gb", "max": 4, "mode": "eager"}, "pools[0].mode", '"eager" is not a valid choice.'),
    ({"flavor": "a100-80gb", "max": 4, "unneeded_minutes": 0}, "pools[0].unneeded_minutes", "greater than or equal"),
    ({"flavor": "a100-80gb", "max": 4, "unneeded_minutes": 1441}, "pools[0].unneeded_minutes", "less than or equal"),
    ({"flavor": "a100-80gb", "max": 4, "remove": True}, "pools[0].remove", "A pool that is removed takes no max."),
    ({"flavor": "a100-80gb", "remove": "yes"}, "pools[0].remove", "Must be a valid boolean."),
    ({"max": 4}, "pools[0].flavor", "This field is required."),
    # A misspelt field was left out: the pool was made with the default idle minutes (10), answering 200.
    ({"flavor": "a100-80gb", "max": 4, "unneeded_minute": 5}, "pools[0]", "Unknown field(s): unneeded_minute;"),
])
def test_every_bad_field_is_a_400_naming_it_and_nothing_is_written(east, flavors, staff, api_client_for, item,
                                                                   field, words):
    # A good pool first and a drain beside it: the bad one makes the whole body fail.
    response = patch(api_client_for(staff), "east", {"state": "draining",
                                                     "pools": [{"flavor": "l4", "max": 1}, item]})
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert list(errors) == [field.replace("[0]", "[1]")], errors
    assert words in errors[field.replace("[0]", "[1]")][0]
    assert not NodePool.objects.exists()
    assert Cluster.objects.get(name="east").state == "ready"
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.CLUSTER_CHANGED).exists()


def test_code_setting_a_pool_holds_to_the_same_cap_on_max(east, flavors, staff):
    """The cap is the field's (fleet.models.MAX_NODES): set_pool from code (seed_demo) refuses past it as the API and
    the admin console do, and writes nothing; at the cap it is taken."""
    a100 = flavors["a100-80gb"]
    with pytest.raises(ValidationError) as refused:
        set_pool(east, a100, {"max_nodes": MAX_NODES + 1}, staff)
    assert refused.value.message_dict == {"max_nodes": [f"At most {MAX_NODES} nodes."]}
    assert not NodePool.objects.exists()
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.CLUSTER_CHANGED).exists()
    assert set_pool(east, a100, {"max_nodes": MAX_NODES}, staff).max_nodes == MAX_NODES
    with pytest.raises(ValidationError):
        set_pool(east, a100, {"max_nodes": 10**6}, staff)
    assert NodePool.objects.get().max_nodes == MAX_NODES


def test_a_lower_max_may_not_leave_the_pools_own_min_above_it(east, flavors, staff, api_client_for):
    NodePool.objects.create(cluster=east, flavor=flavors["a100-80gb"], min_nodes=3, max_nodes=6)
    response = patch(api_client_for(staff), "east", {"pools": [{"flavor": "a100-80gb", "max": 2}]})
    assert response.status_code == 400
    assert response.json()["errors"] == {"pools[0].min": ["The pool's minimum (3) is more than the maximum (2)."]}
    assert NodePool.objects.get().max_nodes == 6
    assert patch(api_client_for(staff), "east", {"pools": [{"flavor": "a100-80gb", "min": 2, "max": 2}]}).json()[
        "pools"][0]["max"] == 2


def test_a_flavor_named_twice_and_a_body_not_a_list_are_400s(east, staff, api_client_for):
    client = api_client_for(staff)
    twice = patch(client, "east", {"pools": [{"flavor": "l4", "max": 1}, {"flavor": "l4", "max": 2}]})
    assert twice.status_code == 400
    assert twice.json()["errors"] == {"pools[1].flavor": ["l4 is named twice; name each pool once."]}
    assert patch(client, "east", {"pools": {"flavor": "l4"}}).json()["errors"]["pools"][0].startswith("Expected a list")
    # A misspelt top-level field ("pool") changed nothing and answered 200.
    misspelt = patch(client, "east", {"pool": [{"flavor": "l4", "max": 1}]})
    assert misspelt.status_code == 400 and misspelt.json()["errors"]["non_field_errors"][0].startswith(
        "Unknown field(s): pool; this body takes")
    assert not NodePool.objects.exists()
    assert patch(client, "east", {"pools": ["l4"]}).json()["errors"] == {
        "pools[0]": ["Invalid data. Expected a dictionary, but got str."]}
    assert not NodePool.objects.exists()


def test_only_staff_with_the_permissions_change_pools(east, member, staff, api_client_for):
    body = {"pools": [{"flavor": "a100-80gb", "max": 4}]}
    assert patch(api_client_for(member), "east", body).status_code == 404  # clusters do not exist to non-staff
    clerk = make_user("cleo")
    clerk.is_staff = True
    clerk.save(update_fields=["is_staff"])
    denied = patch(api_client_for(clerk), "east", body)
    assert denied.status_code == 403 and "fleet.change_cluster" in denied.json()["errors"]["detail"][0]
    clerk.user_permissions.add(Permission.objects.get(codename="change_cluster"))
    clerk = type(clerk).objects.get(pk=clerk.pk)  # permissions are cached on the user
    denied = patch(api_client_for(clerk), "east", body)
    assert denied.status_code == 403 and "fleet.change_nodepool" in denied.json()["errors"]["detail"][0]
    assert patch(api_client_for(clerk), "east", {"state": "draining"}).status_code == 200  # pools need their own
    assert not NodePool.objects.exists()
    clerk.user_permissions.add(Permission.objects.get(codename="change_nodepool"))
    assert patch(api_client_for(type(clerk).objects.get(pk=clerk.pk)), "east", body).status_code == 200
    assert NodePool.objects.get().max_nodes == 4
