"""The OpenAPI document stays valid and describes the docs/api.md contract."""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path

import yaml
from django.core.management import call_command


def test_it_generates_a_valid_schema_without_warnings(tmp_path):
    target = tmp_path / "schema.yaml"
    # --fail-on-warn: an undocumentable view (e.g. a missing serializer) fails here, not in production.
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target), stdout=StringIO())
    schema = yaml.safe_load(target.read_text())
    paths = schema["paths"]
    for path in ["/api/v1/", "/api/v1/teams/", "/api/v1/teams/{slug}/usage/", "/api/v1/flavors/", "/api/v1/usage/",
                 "/api/v1/runs/", "/api/v1/runs/{id}/", "/api/v1/runs/{id}/cancel/", "/api/v1/runs/{id}/logs/",
                 "/api/v1/runs/{id}/events/", "/api/v1/runs/{id}/manifest/", "/api/v1/cohorts/",
                 "/api/v1/cohorts/{name}/", "/api/v1/teams/{slug}/", "/api/v1/teams/{slug}/quotas/",
                 "/api/v1/teams/{slug}/quotas/{flavor}/"]:
        assert path in paths, path
    create = paths["/api/v1/runs/"]["post"]
    assert "201" in create["responses"]
    body = create["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert {"team", "name", "image", "command", "flavor"} <= set(schema["components"]["schemas"][body]["required"])
    assert schema["components"]["schemas"][body]["properties"]["command"]["minItems"] == 1  # [] is a 400
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert set(paths["/api/v1/cohorts/{name}/"]) >= {"get", "put", "delete"}
    assert set(paths["/api/v1/teams/{slug}/"]) >= {"get", "patch"} and "put" in paths["/api/v1/teams/{slug}/quotas/{flavor}/"]
    # The API root names each collection it links to (portal.api_root).
    root = paths["/api/v1/"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert set(schema["components"]["schemas"][root]["properties"]) >= {"runs", "endpoints", "teams", "flavors", "usage"}


def served_schema() -> dict:
    out = StringIO()
    call_command("spectacular", "--format", "openapi-json", stdout=out)
    return json.loads(out.getvalue())


def parameter(operation: dict, name: str) -> dict:
    return next(p for p in operation["parameters"] if p["name"] == name)["schema"]


def test_it_states_the_bounds_and_formats_the_server_enforces():
    paths = served_schema()["paths"]
    for path in ["/api/v1/runs/", "/api/v1/endpoints/", "/api/v1/teams/", "/api/v1/flavors/"]:
        assert parameter(paths[path]["get"], "page_size") == {"type": "integer", "minimum": 1}
        assert parameter(paths[path]["get"], "page") == {"type": "integer", "minimum": 1}
    for path in ["/api/v1/runs/{id}/logs/", "/api/v1/endpoints/{id}/logs/"]:
        assert parameter(paths[path]["get"], "tail") == {"type": "integer", "minimum": 1, "maximum": 5000, "default": 200}
    for name in ("since", "until"):
        assert parameter(paths["/api/v1/usage/"]["get"], name) == {
            "anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "date-time"}]}


def test_it_advertises_json_bodies_only_and_the_size_and_type_errors():
    for path, item in served_schema()["paths"].items():
        for method, operation in item.items():
            if "requestBody" in operation:
                assert list(operation["requestBody"]["content"]) == ["application/json"], (method, path)
                assert {"413", "415"} <= set(operation["responses"]), (method, path)


def test_it_describes_the_yaml_manifest_as_one_kubernetes_list():
    for path in ["/api/v1/runs/{id}/manifest/", "/api/v1/endpoints/{id}/manifest/"]:
        yaml_body = served_schema()["paths"][path]["get"]["responses"]["200"]["content"]["application/yaml"]["schema"]
        assert yaml_body["properties"]["kind"] == {"type": "string", "enum": ["List"]}
        assert yaml_body["required"] == ["apiVersion", "kind", "items"]


def test_a_reused_idempotency_key_is_documented_as_the_400_it_is_and_no_422_is_left():
    paths = served_schema()["paths"]
    keyed = {(method, path) for path, item in paths.items() for method, operation in item.items()
             if any(p["name"] == "Idempotency-Key" for p in operation.get("parameters", ()))}
    assert {("post", "/api/v1/runs/"), ("post", "/api/v1/endpoints/")} <= keyed
    for path, item in paths.items():
        for method, operation in item.items():
            assert "422" not in operation["responses"], (method, path)
            if (method, path) in keyed:
                assert "400" in operation["responses"], (method, path)


#: Old name → its one name (docs/glossary.md), per schema: kept one release, marked deprecated.
RENAMED = {"Run": {"cluster_name": "object_name", "kind": "resource_kind"},
           "Endpoint": {"cluster_name": "object_name", "estimated_cost_per_hour": "cost_per_hour_now"}}
#: An old name that meant two things, split into two names (docs/api.md "Deprecated"): kept one release.
SPLIT = {"Preview": {"estimated_total": "estimated_total_cost"}}


def test_old_names_are_marked_deprecated_beside_their_new_names():
    schemas = served_schema()["components"]["schemas"]
    for name, renamed in RENAMED.items():
        properties = schemas[name]["properties"]
        for old, new in renamed.items():
            assert properties[old]["deprecated"] is True, (name, old)
            assert properties[old]["description"].startswith(f"Deprecated: the same as {new} "), (name, old)
            assert new in properties and not properties[new].get("deprecated"), (name, new)
            assert {k: v for k, v in properties[old].items() if k not in ("deprecated", "description", "readOnly")} == {
                k: v for k, v in properties[new].items() if k not in ("description", "readOnly")}, (name, old)


def test_every_deprecated_field_is_in_the_deprecated_table_of_docs_api_md():
    """Automation learns of a rename from the schema or from docs/api.md: the two say the same."""
    deprecated = {(field, new) for renamed in (*RENAMED.values(), *SPLIT.values()) for field, new in renamed.items()}
    in_schema = {field for schema in served_schema()["components"]["schemas"].values()
                 for field, spec in schema.get("properties", {}).items() if spec.get("deprecated")}
    table = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text().split("## Deprecated", 1)[1]
    rows = {(m[1], m[2]) for m in re.finditer(r"^\| `(\w+)` \| [^|]+ \| `(\w+)`", table, re.M)}
    assert in_schema == {field for field, _new in deprecated}
    assert rows == deprecated


def test_it_describes_the_api_keys_and_their_usage():
    """docs/api.md "API keys": the key is in the creation's answer alone, the usage answers JSON or CSV."""
    schema = served_schema()
    paths, components = schema["paths"], schema["components"]["schemas"]
    for prefix in ("/api/v1/endpoints/{id}/keys/", "/api/v1/teams/{slug}/keys/"):
        assert set(paths[prefix]) >= {"get", "post"}
        assert set(paths[prefix + "{key_pk}/"]) >= {"get", "delete"}
        assert "204" in paths[prefix + "{key_pk}/"]["delete"]["responses"]
        assert "post" in paths[prefix + "{key_pk}/disable/"] and "post" in paths[prefix + "{key_pk}/enable/"]
        created = paths[prefix]["post"]["responses"]["201"]["content"]["application/json"]["schema"]["$ref"]
        listed = paths[prefix]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        assert "key" in components[created.rsplit("/", 1)[-1]]["properties"]
        page = components[listed.rsplit("/", 1)[-1]]["properties"]["results"]["items"]["$ref"].rsplit("/", 1)[-1]
        assert "key" not in components[page]["properties"] and "prefix" in components[page]["properties"]
        usage = paths[prefix + "usage/"]["get"]
        assert set(usage["responses"]["200"]["content"]) == {"application/json", "text/csv"}
        assert {p["name"] for p in usage["parameters"]} >= {"since", "until", "format"}
