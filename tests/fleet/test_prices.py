"""A flavor priced per cluster: placement ranks by it, billing and spend charge it, staff set it audited."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.ledger import month_spend
from billing.models import ClusterPrice, UsageRecord
from billing.services import seed_cluster_prices, set_cluster_price
from fleet.models import Cluster
from teams.models import AuditEvent
from tests.fleet.conftest import apply, iso, node
from workloads.cycle import reconcile as rec

pytestmark = pytest.mark.django_db
NS = "team-ml-research"


@pytest.fixture
def priced(clusters, flavors, staff):
    """East charges 3.00 for an A100-hour, west the flavor's 4.10."""
    set_cluster_price(staff, flavors["a100-80gb"], Cluster.objects.get(name="east"), Decimal("3.00"))
    return clusters


def test_the_cheaper_cluster_wins_and_the_reason_names_both_prices(priced, submit):
    run = apply(submit(gpus_per_worker=2))  # both fit; west has more room, east is cheaper
    assert run.cluster.name == "east"
    assert run.placement_reason == "east: cheapest with 2 free a100-80gb (3.00/h; west 4.10/h)"
    assert run.cost_per_hour_at(2) == Decimal("6.0000")


def test_billing_and_spend_charge_the_clusters_price(priced, submit, team):
    run = apply(submit(gpus_per_worker=2))
    t0 = timezone.now().replace(microsecond=0, second=0, minute=0) - timedelta(hours=2)
    priced["east"].set_running(NS, run.object_name, units=2, started=iso(t0))
    east = Cluster.objects.get(name="east")
    rec.reconcile_cluster(east, priced["east"], now=t0 + timedelta(hours=1, minutes=30))
    rows = UsageRecord.objects.filter(ref=run.ref)
    assert sum(r.cost for r in rows) == Decimal("6.0000")  # the closed hour: 2 units × 1 h × 3.00
    run.refresh_from_db()
    # The open half hour, as every reader prices it (the run's cost and the month's spend).
    assert run.cost_at(t0 + timedelta(hours=1, minutes=30)) == Decimal("9.0000")
    spend = month_spend([team.pk], t0 + timedelta(hours=1, minutes=30))[team.pk]
    assert (spend.spent, spend.burn_per_hour) == (Decimal("9.0000"), Decimal("6.0000"))


def test_a_price_set_removed_and_seeded_is_audited_and_never_overwritten(clusters, flavors, staff, settings):
    a100, east = flavors["a100-80gb"], Cluster.objects.get(name="east")
    set_cluster_price(staff, a100, east, Decimal("3.00"))
    set_cluster_price(staff, a100, east, None)  # back to the flavor's price
    changes = list(AuditEvent.objects.filter(action=AuditEvent.Action.PRICE_CHANGED).order_by("created_at")
                   .values_list("target", "details"))
    assert [t for t, _d in changes] == ["flavor a100-80gb on east"] * 2
    assert changes[1][1]["old"]["price_per_hour"] == "3.0000" and changes[1][1]["new"] is None
    assert not ClusterPrice.objects.exists()


def test_the_demo_clusters_get_the_inventorys_prices_once(settings, flavors, staff):
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    settings.SLIPWAY_SANDBOX_INVENTORY = str(settings.BASE_DIR / "sandbox" / "inventory.yaml")
    assert seed_cluster_prices() > 0
    east_h100 = ClusterPrice.objects.get(cluster__name="east", flavor__name="h100-80gb")
    west_h100 = ClusterPrice.objects.get(cluster__name="west", flavor__name="h100-80gb")
    assert east_h100.price_per_hour != west_h100.price_per_hour
    west_l4 = ClusterPrice.objects.get(cluster__name="west", flavor__name="l4")  # a spot price alone
    assert (west_l4.price_per_hour, west_l4.spot_price_per_hour) == (flavors["l4"].price_per_hour, Decimal("0.28"))
    set_cluster_price(staff, flavors["h100-80gb"], east_h100.cluster, Decimal("1.00"))
    assert seed_cluster_prices() == 0  # staff's price stays
    assert ClusterPrice.objects.get(pk=east_h100.pk).price_per_hour == Decimal("1.00")


def test_staff_price_a_flavor_per_cluster_in_the_admin(clusters, flavors, staff, client):
    client.force_login(staff)
    a100, east = flavors["a100-80gb"], Cluster.objects.get(name="east")
    url = f"/admin/fleet/gpuflavor/{a100.pk}/change/"
    page = client.get(url)
    assert page.status_code == 200 and "Prices on clusters" in page.content.decode()
    form = page.context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None and not isinstance(v, (list, dict))}
    data.update({"node_labels": "{}", "tolerations": "[]", "cluster_prices-TOTAL_FORMS": "1",
                 "cluster_prices-INITIAL_FORMS": "0", "cluster_prices-0-cluster": east.pk,
                 "cluster_prices-0-price_per_hour": "3.25", "cluster_prices-0-spot_price_per_hour": ""})
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert ClusterPrice.objects.get(flavor=a100, cluster=east).price_per_hour == Decimal("3.25")
    assert AuditEvent.objects.filter(action=AuditEvent.Action.PRICE_CHANGED, target="flavor a100-80gb on east",
                                     actor=staff).exists()


def test_a_price_moved_to_another_cluster_in_the_admin_leaves_its_former_cluster(clusters, flavors, staff, client):
    """The inline row east 3.25 changed to west 3.25: west charges 3.25 and east the flavor's price again (both
    audited), as a quota moved to another flavor leaves its former one; east kept its 3.25 beside west's."""
    a100, east, west = flavors["a100-80gb"], Cluster.objects.get(name="east"), Cluster.objects.get(name="west")
    row = set_cluster_price(staff, a100, east, Decimal("3.25"))
    client.force_login(staff)
    url = f"/admin/fleet/gpuflavor/{a100.pk}/change/"
    form = client.get(url).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None and not isinstance(v, (list, dict))}
    data.update({"node_labels": "{}", "tolerations": "[]", "cluster_prices-TOTAL_FORMS": "1",
                 "cluster_prices-INITIAL_FORMS": "1", "cluster_prices-0-id": row.pk, "cluster_prices-0-flavor": a100.pk,
                 "cluster_prices-0-cluster": west.pk, "cluster_prices-0-price_per_hour": "3.25",
                 "cluster_prices-0-spot_price_per_hour": ""})
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert list(ClusterPrice.objects.filter(flavor=a100).values_list("cluster__name", "price_per_hour")) == [
        ("west", Decimal("3.25"))]
    targets = set(AuditEvent.objects.filter(action=AuditEvent.Action.PRICE_CHANGED, actor=staff)
                  .values_list("target", flat=True))
    assert targets == {"flavor a100-80gb on east", "flavor a100-80gb on west"}


def test_a_burst_of_applies_counts_what_was_just_placed_and_spreads(priced, submit, flavors):
    # The clusters show the same free A100s to every apply (their nodes do not show pods not bound yet).
    priced["east"].nodes = [node("east-a100-0", flavors["a100-80gb"], free=5)]
    first = apply(submit(name="first", gpus_per_worker=4))
    second = apply(submit(name="second", gpus_per_worker=4))
    assert (first.cluster.name, second.cluster.name) == ("east", "west")  # east is cheaper, but has 1 left
    assert second.placement_reason.startswith("west: the only cluster that can take it now")
