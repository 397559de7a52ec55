"""The endpoint vocabulary and defaults are defined once, beside the endpoint's spec (inference.specs); the app's
choices, forms and serializers only name them."""

from __future__ import annotations

from cluster.specs import FlavorSpec
from inference import specs
from inference.constants import Engine, Metric
from inference.manifests import QUERIES
from inference.models import InferenceEndpoint


def test_the_apps_choices_are_the_specs_vocabulary():
    assert tuple(Metric.values) == specs.METRICS and dict(Metric.choices) == specs.METRIC_LABELS
    assert tuple(Engine.values) == specs.ENGINES and dict(Engine.choices) == specs.ENGINE_LABELS
    assert set(specs.ENGINES) <= set(QUERIES)  # the builder has a queue query for every engine


def test_a_new_endpoints_defaults_are_the_specs_defaults():
    fields = {f.name: f for f in InferenceEndpoint._meta.get_fields() if hasattr(f, "default")}
    defaults = specs.EndpointSpec("ep-1", "t", "ns", "n", "img", FlavorSpec("f", "nvidia.com/gpu", "G"))
    for name in ("port", "scale_down_delay_seconds", "readiness_path", "startup_timeout_seconds"):
        assert fields[name].default == getattr(defaults, name), name
    assert (defaults.metric, defaults.target) == (specs.DEFAULT_METRIC, specs.DEFAULT_GPU_UTILIZATION_TARGET)
