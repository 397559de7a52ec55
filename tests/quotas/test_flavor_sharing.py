"""Shared flavors in the quotas app: node labels checked against GPU Feature Discovery's, the admin, the demo.

A time-sliced or MPS flavor's pods select the labels GFD puts on shared nodes (cluster.nvidia);
``GpuFlavor.clean()`` refuses node labels that contradict them, with a field error that says what
GFD labels such nodes with — in the admin as a form error.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from fleet.constants import Sharing
from fleet.models import GpuFlavor
from quotas.demo import flavor_definitions

ADD_URL = "/admin/fleet/gpuflavor/add/"


def shared(**overrides) -> GpuFlavor:
    """An unsaved time-sliced T4 flavor (x4), valid unless ``overrides`` break it."""
    values = {"name": "t4-ts4", "resource_name": "nvidia.com/gpu", "gpu_model": "Tesla-T4", "gpu_memory_gb": 16,
              "sharing": Sharing.TIME_SLICING, "replicas": 4, "training": False, "max_units_per_node": 8,
              "price_per_hour": Decimal("0.10"), "spot_price_per_hour": Decimal("0.04")}
    values.update(overrides)
    return GpuFlavor(**values)


def node_labels_error(flavor: GpuFlavor) -> str:
    with pytest.raises(ValidationError) as caught:
        flavor.clean()
    [message] = caught.value.message_dict["node_labels"]
    return message


def test_it_refuses_a_whole_gpu_product_label_on_a_time_sliced_flavor():
    message = node_labels_error(shared(node_labels={"nvidia.com/gpu.product": "Tesla-T4"}))
    assert message.startswith("nvidia.com/gpu.product=Tesla-T4 matches no node of this flavor")
    # It says what GFD labels such nodes with.
    assert ("nvidia.com/gpu.product=Tesla-T4-SHARED, nvidia.com/gpu.replicas=4, "
            "nvidia.com/gpu.sharing-strategy=time-slicing") in message
    assert "time-sliced ×4" in message


@pytest.mark.parametrize(("overrides", "conflict", "gfd"), [
    ({"sharing": Sharing.MPS, "replicas": 2, "node_labels": {"nvidia.com/gpu.sharing-strategy": "time-slicing"}},
     "nvidia.com/gpu.sharing-strategy=time-slicing", "nvidia.com/gpu.sharing-strategy=mps"),
    ({"node_labels": {"nvidia.com/gpu.replicas": "8"}}, "nvidia.com/gpu.replicas=8", "nvidia.com/gpu.replicas=4"),
    # Renamed shared GPUs (nvidia.com/gpu.shared): GFD keeps the plain product there.
    ({"sharing": Sharing.MPS, "replicas": 2, "resource_name": "nvidia.com/gpu.shared",
      "node_labels": {"nvidia.com/gpu.product": "Tesla-T4-SHARED"}},
     "nvidia.com/gpu.product=Tesla-T4-SHARED", "nvidia.com/gpu.product=Tesla-T4,"),
    # A whole GPU is never on a node GFD labels as shared.
    ({"sharing": Sharing.NONE, "replicas": 1, "node_labels": {"nvidia.com/gpu.sharing-strategy": "time-slicing"}},
     "nvidia.com/gpu.sharing-strategy=time-slicing", "nvidia.com/gpu.sharing-strategy=none"),
])
def test_it_refuses_node_labels_gfd_never_puts_on_the_flavors_nodes(overrides, conflict, gfd):
    message = node_labels_error(shared(**overrides))
    assert message.startswith(f"{conflict} matches no node of this flavor") and gfd in message


@pytest.mark.parametrize("node_labels", [
    {},
    {"node.kubernetes.io/instance-type": "g4dn.12xlarge"},
    {"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.replicas": "4"},  # GFD's own values: redundant, fine
])
def test_it_takes_node_labels_that_agree_with_gfd(node_labels):
    shared(node_labels=node_labels).clean()


def test_it_refuses_node_labels_that_are_no_object():
    with pytest.raises(ValidationError) as caught:
        shared(node_labels=["nvidia.com/gpu.product"]).clean()
    assert "A JSON object" in caught.value.message_dict["node_labels"][0]


def test_it_leaves_node_labels_alone_while_the_sharing_itself_is_wrong():
    # replicas 1 on a time-sliced flavor is its own error; GFD's labels of such a set-up mean nothing.
    with pytest.raises(ValidationError) as caught:
        shared(replicas=1, node_labels={"nvidia.com/gpu.product": "Tesla-T4"}).clean()
    assert set(caught.value.message_dict) == {"replicas"}


@pytest.mark.django_db
def test_every_demo_flavor_is_valid_and_the_shared_ones_are_priced_per_unit():
    for definition in flavor_definitions():
        GpuFlavor(**definition).full_clean()
    defs = {d["name"]: d for d in flavor_definitions()}
    t4, a10g = defs["t4-ts4"], defs["a10g-mps2"]
    assert (t4["sharing"], t4["replicas"], t4["gpu_model"], t4["gpu_memory_gb"]) == ("time-slicing", 4, "Tesla-T4", 16)
    assert (t4["price_per_hour"], t4["spot_price_per_hour"], t4["training"]) == (Decimal("0.10"), Decimal("0.04"), False)
    assert "No memory isolation" in t4["description"] and "not for training" in t4["description"].lower()
    assert "0.40/h / 4" in t4["description"]
    assert (a10g["sharing"], a10g["replicas"], a10g["gpu_model"], a10g["gpu_memory_gb"]) == ("mps", 2, "NVIDIA-A10G", 24)
    assert (a10g["price_per_hour"], a10g["spot_price_per_hour"]) == (Decimal("0.50"), Decimal("0.20"))
    assert a10g["training"] is True and a10g["one_team_per_gpu"] is True and "1.00/h / 2" in a10g["description"]
    for d in (t4, a10g):
        assert d["resource_name"] == "nvidia.com/gpu" and len(d["description"]) <= 200


@pytest.fixture
def staff_client(staff) -> Client:
    client = Client()
    client.force_login(staff)
    return client


def add_form(**overrides) -> dict[str, str]:
    data = {"name": "t4-ts4", "description": "", "active": "on", "resource_name": "nvidia.com/gpu",
            "gpu_model": "Tesla-T4", "mig_profile": "", "gpu_memory_gb": "16", "gpu_fraction": "1",
            "max_units_per_node": "8", "sharing": "time-slicing", "replicas": "4",
            "node_labels": "{}", "tolerations": "[]", "price_per_hour": "0.10", "spot_price_per_hour": "0.04",
            "cluster_prices-TOTAL_FORMS": "0", "cluster_prices-INITIAL_FORMS": "0"}
    data.update(overrides)
    return data


def test_the_admin_shows_the_gfd_labels_when_it_refuses_node_labels(staff_client):
    response = staff_client.post(ADD_URL, add_form(node_labels='{"nvidia.com/gpu.product": "Tesla-T4"}'))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "nvidia.com/gpu.product=Tesla-T4-SHARED" in errors["node_labels"][0]
    assert not GpuFlavor.objects.filter(name="t4-ts4").exists()


def test_the_admin_adds_a_shared_flavor_as_a_unit_of_one_over_replicas(staff_client):
    response = staff_client.post(ADD_URL, add_form(training="", one_team_per_gpu="on"))
    assert response.status_code == 302, response.content.decode()[:2000]
    flavor = GpuFlavor.objects.get(name="t4-ts4")
    assert (flavor.sharing, flavor.replicas, flavor.gpu_fraction, flavor.training) == (
        "time-slicing", 4, Decimal("0.25"), False)


def test_the_admin_lists_and_explains_sharing(staff_client, flavors):
    listing = staff_client.get("/admin/fleet/gpuflavor/").content.decode()
    for column in ("column-sharing", "column-replicas", "column-training", "column-one_team_per_gpu"):
        assert column in listing
    assert "Time-sliced" in listing and "MPS" in listing  # the demo's shared flavors, by their sharing's label
    page = staff_client.get(f"/admin/fleet/gpuflavor/{flavors['t4-ts4'].pk}/change/").content.decode()
    assert "device_plugin_config" in page and "Tesla-T4-SHARED" in page  # the Sharing help, the node label help
