"""The OpenAPI document stays valid and describes the API.md contract."""

from __future__ import annotations

from io import StringIO

import yaml
from django.core.management import call_command


def test_it_generates_a_valid_schema_without_warnings(tmp_path):
    target = tmp_path / "schema.yaml"
    # --fail-on-warn: an undocumentable view (e.g. a missing serializer) fails here, not in production.
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target), stdout=StringIO())
    schema = yaml.safe_load(target.read_text())
    paths = schema["paths"]
    for path in ["/api/v1/teams/", "/api/v1/teams/{slug}/usage/", "/api/v1/flavors/", "/api/v1/usage/",
                 "/api/v1/runs/", "/api/v1/runs/{id}/", "/api/v1/runs/{id}/cancel/", "/api/v1/runs/{id}/logs/",
                 "/api/v1/runs/{id}/events/", "/api/v1/runs/{id}/manifest/"]:
        assert path in paths, path
    create = paths["/api/v1/runs/"]["post"]
    assert "201" in create["responses"]
    body = create["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert {"team", "name", "image", "command", "flavor"} <= set(schema["components"]["schemas"][body]["required"])
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
