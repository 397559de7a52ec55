"""The flavor policy and advice of the GPU sharing trade-offs (quotas.policy, issue 37 items 3 and 5)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from fleet.models import GpuFlavor
from quotas import policy
from tests.shared_flavors import make_shared_flavors

pytestmark = pytest.mark.django_db

RUN = policy.Shape(training=True)
SERVE = policy.Shape(training=False)


@pytest.fixture
def shared(flavors):
    return make_shared_flavors()


def whole_t4(**fields) -> GpuFlavor:
    return GpuFlavor.objects.create(name="t4", resource_name="nvidia.com/gpu", gpu_model="Tesla-T4", gpu_memory_gb=16,
                                    price_per_hour=Decimal("0.40"), spot_price_per_hour=Decimal("0.16"), **fields)


def test_a_time_sliced_flavor_refuses_distributed_runs_and_names_the_cheapest_whole_gpu(shared):
    refused = policy.refusals(shared["t4-ts4"], policy.Shape(training=True, workers=2))
    # No whole T4 is offered: the cheapest whole GPU that takes training (the L4) is named.
    assert "distributed run" in refused.workers and "Use l4 (NVIDIA-L4, whole GPUs) instead." in refused.workers
    assert refused.errors(units_field="gpus_per_worker")["workers"] == [refused.workers]


def test_the_whole_gpu_of_the_same_model_is_preferred_while_it_is_offered(shared):
    t4 = whole_t4()
    assert policy.instead(shared["t4-ts4"], training=True) == t4
    assert "Use t4 (Tesla-T4, whole GPUs)" in policy.refusals(shared["t4-ts4"], policy.Shape(True, workers=3)).workers
    t4.active = False
    t4.save()
    assert policy.instead(shared["t4-ts4"], training=True).name == "l4"  # a retired flavor is never suggested


def test_a_shared_flavor_gives_each_pod_one_unit(shared):
    for name in ("t4-ts4", "a10g-mps2"):
        refused = policy.refusals(shared[name], policy.Shape(training=False, units_per_pod=2))
        assert "refuses more than one" in refused.units_per_pod, name
        assert refused.errors(units_field="gpus_per_replica") == {"gpus_per_replica": [refused.units_per_pod]}
        assert not policy.refusals(shared[name], SERVE)


def test_mps_takes_single_node_training_but_not_distributed_runs(shared):
    mps = shared["a10g-mps2"]
    assert not policy.refusals(mps, policy.Shape(training=True, workers=1, units_per_pod=1))
    assert "1/2 of a NVIDIA-A10G" in policy.refusals(mps, policy.Shape(training=True, workers=4)).workers


def test_a_flavor_marked_training_false_refuses_runs_but_serves(shared):
    refused = policy.refusals(shared["t4-ts4"], RUN)
    assert refused.flavor.startswith("t4-ts4 does not take training runs") and "Use l4" in refused.flavor
    assert refused.errors(units_field="gpus_per_worker") == {"flavor": [refused.flavor]}
    assert not policy.refusals(shared["t4-ts4"], SERVE)


def test_whole_gpus_and_mig_slices_take_any_shape(flavors):
    shape = policy.Shape(training=True, workers=4, units_per_pod=8)
    assert not policy.refusals(flavors["a100-80gb"], shape)
    assert not policy.refusals(flavors["a100-1g.10gb"], policy.Shape(training=True, workers=4, units_per_pod=2))


def test_no_whole_gpu_at_all_still_refuses_and_says_what_to_change(shared):
    GpuFlavor.objects.filter(sharing="none").update(active=False)
    refused = policy.refusals(shared["a10g-mps2"], policy.Shape(training=True, workers=2, units_per_pod=2))
    assert refused.workers.endswith("Use 1 worker.") and refused.units_per_pod.endswith("Ask for 1.")


def test_with_no_whole_gpu_a_flavor_without_training_never_advises_one_worker(shared):
    # One worker of t4-ts4 is refused too (no training): the refusal says nothing is open instead.
    GpuFlavor.objects.filter(sharing="none").update(active=False)
    refused = policy.refusals(shared["t4-ts4"], policy.Shape(training=True, workers=2))
    assert "Use 1 worker" not in refused.workers
    assert refused.workers.endswith("No whole-GPU flavor is open for it now: ask a platform admin for one.")
    assert refused.flavor.endswith("No whole-GPU flavor is open for it now: ask a platform admin for one.")


def test_it_warns_of_a_model_larger_than_a_units_memory(shared, flavors):
    [warning] = policy.warnings(shared["t4-ts4"], SERVE, 70)
    assert warning.startswith("A pod that needs 70 GB of GPU memory on t4-ts4 (a time-sliced 16 GB Tesla-T4")
    [warning] = policy.warnings(shared["a10g-mps2"], SERVE, 13)  # an MPS unit: 24 / 2 = 12 GB
    assert "an MPS unit limited to 12 GB" in warning
    assert policy.warnings(shared["a10g-mps2"], SERVE, 12) == ()
    assert "a MIG slice with 10 GB" in policy.warnings(flavors["a100-1g.10gb"], SERVE, 11)[0]
    # Units of a whole GPU add up: two A100s hold 160 GB.
    assert policy.warnings(flavors["a100-80gb"], policy.Shape(training=True, units_per_pod=2), 150) == ()
    assert policy.warnings(flavors["a100-80gb"], policy.Shape(training=True, units_per_pod=1), 150) != ()


def test_it_warns_when_time_sliced_pods_together_outgrow_their_gpu(shared):
    [warning] = policy.warnings(shared["t4-ts4"], SERVE, 6)  # 4 × 6 GB > 16 GB
    assert "no memory isolation: at 6 GB each, more than 2 on one GPU run out of memory" in warning
    assert policy.warnings(shared["t4-ts4"], SERVE, 4) == ()  # 4 × 4 GB fit
    assert policy.warnings(shared["t4-ts4"], SERVE, None) == ()


def test_it_warns_of_training_on_a_time_sliced_flavor_that_allows_it(flavors):
    ts = make_shared_flavors(**{"t4-ts4": {"training": True}})["t4-ts4"]
    [warning] = policy.warnings(ts, RUN, None)
    assert "takes turns on the GPU with up to 3 other pods" in warning
    assert policy.warnings(ts, SERVE, None) == ()


def test_traits_say_sharing_isolation_and_memory_per_unit(shared, flavors):
    assert policy.traits(shared["t4-ts4"]) == "Time-sliced \u00d74 \u00b7 no isolation \u00b7 16 GB shared \u00b7 no training"
    assert policy.traits(shared["a10g-mps2"]) == "MPS \u00d72 \u00b7 partial isolation \u00b7 12 GB own"
    assert policy.traits(flavors["a100-1g.10gb"]) == "MIG slice \u00b7 hardware isolation \u00b7 10 GB own"
    assert policy.traits(flavors["a100-80gb"]) == "Whole GPU \u00b7 exclusive \u00b7 80 GB own"


def test_the_guide_has_one_row_per_sharing_with_the_isolation_of_the_vocabulary():
    assert [row.sharing for row in policy.GUIDE] == ["none", "mig", "time-slicing", "mps"]
    assert [row.isolation for row in policy.GUIDE] == ["exclusive", "hardware", "none", "partial"]


# -- GET /api/v1/flavors/ ------------------------------------------------------------------------


def test_the_flavors_api_says_how_each_unit_shares_its_gpu(api, shared):
    rows = {row["name"]: row for row in api.get("/api/v1/flavors/").json()["results"]}
    fields = ("sharing", "replicas", "isolation", "memory_per_unit_gb", "memory_shared", "memory_isolated", "training",
              "one_team_per_gpu", "gpu_memory_gb", "price_per_hour")
    got = {name: tuple(rows[name][f] for f in fields) for name in ("t4-ts4", "a10g-mps2", "a100-1g.10gb", "a100-80gb")}
    assert got == {
        "t4-ts4": ("time-slicing", 4, "none", "16.0", True, False, False, False, 16, "0.1000"),
        "a10g-mps2": ("mps", 2, "partial", "12.0", False, True, True, True, 24, "0.5000"),
        "a100-1g.10gb": ("mig", 1, "hardware", "10.0", False, True, True, False, 10, "0.5857"),
        "a100-80gb": ("none", 1, "exclusive", "80.0", False, True, True, False, 80, "4.1000"),
    }
    assert rows["t4-ts4"]["gpu_fraction"] == 0.25 and rows["a10g-mps2"]["gpu_fraction"] == 0.5


def test_the_flavors_api_and_the_help_page_price_a_unit_alike(api, client, member, shared):
    """The one price (billing.pricing) on both surfaces: the API's per unit-hour is what the page shows."""
    client.force_login(member)
    html = client.get("/help/flavors/").content.decode()
    for row in api.get("/api/v1/flavors/").json()["results"]:
        line = html[html.index(f'id="flavor-{row["name"]}"'):]
        price = Decimal(row["price_per_hour"]).normalize()
        assert f"{price:f} USD/h" in line[:line.index("</tr>")] or f"{price:.2f} USD/h" in line[:line.index("</tr>")]


def test_it_warns_that_shared_memory_goes_unused_on_mps(shared, flavors):
    # The device plugin owns /dev/shm in MPS pods, so the run's shm_gb cannot be honoured there.
    [warning] = policy.warnings(shared["a10g-mps2"], policy.Shape(training=True, shm_gb=8), None)
    assert warning == "a10g-mps2 is an MPS flavor: its pods' /dev/shm is the MPS daemon's, so shm_gb (8 GB) has no effect there."
    assert not policy.warnings(flavors["a100-80gb"], policy.Shape(training=True, shm_gb=8), None)
