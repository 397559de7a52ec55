"""The API's documented input agrees with the validation that enforces it.

For every numeric field of the serializers the OpenAPI schema is generated from, the
validation is probed at the documented bounds and just past them: what the schema allows the
validation accepts, what it refuses the validation refuses, and a field the validation bounds
must carry that bound in the schema.
"""

from __future__ import annotations

from functools import partial

import pytest
from django.core.exceptions import ValidationError
from rest_framework import serializers

from inference.serializers import EndpointCreateSerializer
from inference.validation import parse_endpoint_request
from jobs.serializers import RunCreateSerializer
from jobs.validation import parse_run_request

RUN = {"name": "probe", "image": "registry.example.com/ml/t:1", "command": ["python"], "flavor": "a100-80gb"}
ENDPOINT = {"name": "probe", "image": "registry.example.com/s/vllm:1", "flavor": "a100-80gb"}
CASES = [(RunCreateSerializer, parse_run_request, RUN),
         (EndpointCreateSerializer, partial(parse_endpoint_request, namespace="team-probe"), ENDPOINT)]


def numeric_fields(serializer_class):
    for name, field in serializer_class().fields.items():
        if isinstance(field, serializers.IntegerField | serializers.FloatField):
            yield name, field


def accepts(parse, base: dict, name: str, value) -> bool:
    try:
        parse({**base, name: value})
    except ValidationError as exc:
        return name not in exc.message_dict
    return True


def probe_cases():
    for serializer_class, parse, base in CASES:
        for name, field in numeric_fields(serializer_class):
            yield pytest.param(field, parse, base, name, id=f"{serializer_class.__name__}.{name}")


@pytest.mark.parametrize(("field", "parse", "base", "name"), list(probe_cases()))
def test_the_schemas_bounds_are_the_validations(field, parse, base, name):
    step = 1 if isinstance(field, serializers.IntegerField) else 0.001
    # A field the validation bounds must say so in the schema...
    assert field.max_value is not None or accepts(parse, base, name, 10**9), f"{name}: no maximum in the schema"
    assert field.min_value is not None or accepts(parse, base, name, -(10**9)), f"{name}: no minimum in the schema"
    # ...and the schema's bounds are exactly where the validation starts refusing.
    if field.max_value is not None:
        assert accepts(parse, base, name, field.max_value) or name == "shm_gb"  # shm_gb is also at most memory_gb
        assert not accepts(parse, base, name, field.max_value + step)
    if field.min_value is not None:
        assert accepts(parse, base, name, field.min_value)
        assert not accepts(parse, base, name, field.min_value - step)
