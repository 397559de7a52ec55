"""One price (issue 34 item 3): what a unit-hour is quoted before placement is what it is charged after.

Two clusters price the A100 differently (east 3.00, west the flavor's 4.10). Every place a user
reads a price — the preview (form and dry-run), the flavors API, the run's API and page — takes
it from :mod:`billing.pricing`, and the run is then charged exactly that.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

import fleet.services as fleet
from billing.models import TeamBudget
from billing.pricing import PriceBook, Quote, quote
from billing.services import budget_summary, set_cluster_price
from fleet.models import Cluster
from jobs.services import preview_run
from tests.fleet.conftest import apply, iso
from tests.jobs.conftest import run_payload
from workloads.cycle import reconcile as rec

pytestmark = pytest.mark.django_db
NS = "team-ml-research"


@pytest.fixture
def priced(clusters, flavors, staff):
    """East charges 3.00 for an A100-hour, west the flavor's 4.10; both clusters' nodes recorded
    (what the reconcile cycle does each round), as quotes read them."""
    set_cluster_price(staff, flavors["a100-80gb"], Cluster.objects.get(name="east"), Decimal("3.00"))
    record(clusters)
    return clusters


def record(backends) -> None:
    for cluster in Cluster.objects.all():
        fleet.record_nodes(cluster, backends[cluster.name].capacity(), timezone.now())


def dry_run(team, **overrides):
    data = run_payload(**overrides)
    data.pop("team")
    return preview_run(team, data)


def test_the_quote_is_the_price_on_the_cluster_placement_would_choose_with_the_range(priced, flavors):
    a100 = flavors["a100-80gb"]
    assert flavors["a100-80gb"].price_per_hour == Decimal("4.10")  # the list price, charged nowhere here
    one = quote(a100, units=2, units_per_node=2)
    assert (one.price, one.cluster, one.low, one.high, one.placed) == (Decimal("3.00"), "east", Decimal("3.00"),
                                                                         Decimal("4.10"), False)
    assert one.words("USD") == "3.00 USD/h on east (3.00\u20134.10)"
    # East has 2 free: 8 units go where they fit now, and cost what they cost there.
    big = quote(a100, units=8, units_per_node=8)
    assert (big.price, big.cluster) == (Decimal("4.10"), "west")
    # A cluster selector is placement's too.
    pinned = quote(a100, units=1, units_per_node=1, selector={"site": "cloud"})
    assert (pinned.price, pinned.cluster) == (Decimal("4.10"), "west")


def test_no_cluster_can_take_it_now_quotes_the_dearest_with_the_range(priced, flavors, staff):
    for cluster in Cluster.objects.all():
        fleet.set_draining(cluster, True, staff)
    waiting = quote(flavors["a100-80gb"])
    assert (waiting.price, waiting.cluster) == (Decimal("4.10"), "")
    assert waiting.words("USD") == "3.00\u20134.10 USD/h, by the cluster it starts on"


def test_a_placed_run_is_quoted_its_charged_rate(priced, submit):
    run = apply(submit(gpus_per_worker=2))
    placed = run.price_quote()
    assert (placed.price, placed.cluster, placed.placed) == (Decimal("3.00"), "east", True)
    assert placed.words("USD") == "3.00 USD/h on east"
    assert run.unit_price() == placed.price


@pytest.mark.parametrize("selector,cluster,price", [({"site": "onprem"}, "east", "3.00"),
                                                    ({"site": "cloud"}, "west", "4.10")])
def test_quote_equals_charge_to_the_cent_on_each_cluster(priced, submit, team, member, client, selector, cluster,
                                                          price):
    """Dry run, the API (before and after placement) and the page quote the price the ledger charges."""
    rate = Decimal(price)
    forecast = dry_run(team, gpus_per_worker=2, cluster_selector=selector)
    assert (forecast.price_per_hour, forecast.cluster, forecast.cost_per_hour) == (rate, cluster, rate * 2)
    run = submit(gpus_per_worker=2, cluster_selector=selector)
    assert run.estimated_cost_per_hour == rate * 2  # what the submission committed
    client.force_login(member)
    before = client.get(f"/api/v1/runs/{run.pk}/").json()
    assert (Decimal(before["price_per_hour"]), Decimal(before["estimated_cost_per_hour"])) == (rate, rate * 2)
    run = apply(run)
    assert run.cluster.name == cluster
    after = client.get(f"/api/v1/runs/{run.pk}/").json()
    assert (Decimal(after["price_per_hour"]), after["cluster"]) == (rate, cluster)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert f"{price} USD/h on {cluster}" in page
    # Charged: two hours of 2 units at the quoted rate, to the cent.
    t0 = timezone.now().replace(microsecond=0, second=0, minute=0) - timedelta(hours=3)
    priced[cluster].set_running(NS, run.object_name, units=2, started=iso(t0))
    rec.reconcile_cluster(run.cluster, priced[cluster], now=t0 + timedelta(hours=2))
    run.refresh_from_db()
    assert run.cost_at(t0 + timedelta(hours=2)) == (rate * 2 * 2).quantize(Decimal("0.01"))


def test_the_flavors_api_gives_the_price_now_and_the_range(priced, member, client):
    client.force_login(member)
    a100 = next(f for f in client.get("/api/v1/flavors/").json()["results"] if f["name"] == "a100-80gb")
    assert (a100["price_per_hour"], a100["cluster"], a100["price_range"]) == (
        "3.0000", "east", {"min": "3.0000", "max": "4.1000"})


def test_the_form_and_its_preview_quote_the_same_words(priced, member, client, team):
    client.force_login(member)
    form = client.get("/runs/new/").content.decode()
    assert "a100-80gb \u2014 3.00 USD/h on east (3.00\u20134.10)" in form
    forecast = dry_run(team, gpus_per_worker=1)
    assert forecast.price_words == "3.00 USD/h on east (3.00\u20134.10)"


def test_a_list_quotes_every_row_from_one_read(priced, flavors, django_assert_max_num_queries):
    book = PriceBook()
    book.quote(flavors["a100-80gb"])
    with django_assert_max_num_queries(0):
        for _ in range(5):
            book.quote(flavors["a100-80gb"], units=2, units_per_node=2)


def test_the_budget_gate_bound_counts_a_clusters_price_above_the_list_price(clusters, flavors, staff, submit, team):
    """H100 on east at 7.20 against a list price of 6.88 (issue 34): with the list price as its
    bound, admission let a team past its budget. Held work placed at east's dearer A100 price
    commits more than the list price bound says; the next run must wait for budget."""
    a100 = flavors["a100-80gb"]
    set_cluster_price(staff, a100, Cluster.objects.get(name="east"), Decimal("9.00"))  # above the list 4.10
    record(clusters)
    held = apply(submit(gpus_per_worker=2, cluster_selector={"site": "onprem"}))  # no limit: to the month's end
    assert held.cluster.name == "east"
    now = timezone.now()
    summary = budget_summary(team, now)
    # Budget: what is committed now at east's price, plus a little: a second 1-unit, 60-minute run
    # at 4.10 would fit under a bound taken at the list price, but not the true commitment.
    TeamBudget.objects.filter(team=team).update(
        monthly_limit=(summary["spent_month"] + summary["committed"] + 2).quantize(Decimal("0.01")))
    run = submit(name="second", gpus_per_worker=1, max_runtime_minutes=60, cluster_selector={"site": "cloud"})
    assert run.state == "queued" and "budget" in run.reason


def test_one_quote_class_prices_per_hour_as_the_ledger():
    q = Quote(Decimal("0.5143"), "east", False, Decimal("0.5143"), Decimal("0.59"))
    assert q.per_hour(3) == Decimal("1.5429") and q.varies
    assert q.words("USD") == "0.5143 USD/h on east (0.5143\u20130.59)"


def test_an_endpoint_that_scales_to_zero_is_previewed_at_what_admission_commits(priced, team, member, ep_quota):
    """Issue 34: min_replicas 0 was previewed at one replica's price but committed nothing. One rule:
    the preview's rate and budget figure are the ones the endpoint's admission request commits."""
    from inference.services import create_endpoint, preview_endpoint
    from tests.inference.conftest import endpoint_payload
    from workloads.registry import kind_of

    payload = endpoint_payload(name="wakes", min_replicas=0, max_replicas=2,
                               autoscale={"metric": "queue_length", "engine": "vllm", "target": 5})
    preview = preview_endpoint(team, dict(payload))
    endpoint = create_endpoint(member, team, dict(payload))
    request = kind_of(endpoint).resource_request(endpoint)
    assert preview.preview.cost_per_hour == request.cost_per_hour == Decimal("0")
    assert preview.preview.committed_cost == request.committed_cost(Decimal(100)) == Decimal("0")
    assert preview.preview.price_per_hour == endpoint.price_quote().price  # a unit-hour: the one price


def test_a_flavors_price_per_hour_is_one_definition_the_dry_runs_and_the_schema_says_it(
        priced, member, client, team, staff, tmp_path):
    """Issue 46: ``price_per_hour`` was the low end of the range for one flavor and the high end for another,
    with no word on why. One definition — the quote for one on-demand unit now, ``cluster`` naming where —
    the dry run's too; the schema states it."""
    from io import StringIO

    import yaml
    from django.core.management import call_command

    def a100() -> dict:
        return next(f for f in client.get("/api/v1/flavors/").json()["results"] if f["name"] == "a100-80gb")

    client.force_login(member)
    forecast = dry_run(team, gpus_per_worker=1)
    now = a100()
    assert (Decimal(now["price_per_hour"]), now["cluster"]) == (forecast.price_per_hour, forecast.cluster) == (
        Decimal("3.00"), "east")  # the range's low end while east takes work
    fleet.set_draining(Cluster.objects.get(name="east"), True, staff)  # east takes no new work now
    full = a100()
    assert (full["price_per_hour"], full["cluster"], full["price_range"]) == (
        "4.1000", "west", {"min": "3.0000", "max": "4.1000"})  # west's, the high end — as a dry run says
    assert Decimal(full["price_per_hour"]) == dry_run(team, gpus_per_worker=1).price_per_hour
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--file", str(target), stdout=StringIO())
    schemas = yaml.safe_load(target.read_text())["components"]["schemas"]
    flavor = next(body for body in schemas.values() if "price_range" in body.get("properties", {}))
    described = flavor["properties"]["price_per_hour"].get("description", "")
    assert "submitted now" in described and "highest of `price_range`" in described


def test_a_price_change_reaches_running_work_only_from_its_next_segment(priced, submit, member, client, staff):
    """Issue 46: the charged rate is frozen when a segment opens. Staff raising east's price mid-hour changes
    neither the hour running nor what the run shows; the next hour (a new segment) is charged the new price."""
    rate, dearer = Decimal("3.00"), Decimal("9.00")
    run = apply(submit(gpus_per_worker=2, cluster_selector={"site": "onprem"}))
    t0 = timezone.now().replace(microsecond=0, second=0, minute=0) - timedelta(hours=3)
    priced["east"].set_running(NS, run.object_name, units=2, started=iso(t0))
    rec.reconcile_cluster(run.cluster, priced["east"], now=t0 + timedelta(hours=2))
    run.refresh_from_db()
    assert run.charged_price == rate
    set_cluster_price(staff, run.flavor, run.cluster, dearer)
    run.refresh_from_db()
    client.force_login(member)
    assert Decimal(client.get(f"/api/v1/runs/{run.pk}/").json()["price_per_hour"]) == rate
    assert run.cost_at(t0 + timedelta(hours=2, minutes=30)) == 2 * rate * Decimal("2.5")
    # The hour rolls over (a steady cycle): the closed hour at 3.00, the next segment at 9.00.
    rec.reconcile_cluster(run.cluster, priced["east"], now=t0 + timedelta(hours=3, minutes=5))
    run.refresh_from_db()
    assert run.charged_price == dearer
    assert Decimal(client.get(f"/api/v1/runs/{run.pk}/").json()["price_per_hour"]) == dearer
    assert run.billed_cost == 2 * rate * 3
    assert run.cost_at(t0 + timedelta(hours=3, minutes=30)) == 2 * rate * 3 + 2 * dearer / 2
