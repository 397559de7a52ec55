"""The workspaces API: create (and its dry run), read, pause, resume, open, share, delete; its schema."""

from __future__ import annotations

import pytest
import yaml
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotas.demo import seed_team_quotas
from workspaces import services
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db
URL = "/api/v1/workspaces/"


@pytest.fixture
def ws_api(api, ws_quota, published):
    return api


def test_it_creates_a_workspace_and_shows_no_token(ws_api, team):
    response = ws_api.post(URL, {"team": team.slug, "name": "explore", "flavor": "a100-1g.10gb", "home_gb": 50},
                           format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["state"], body["priority"], body["home_gb"], body["idle_minutes"]) == ("admitted", "high", 50, 60)
    assert body["object_name"] == f"ws-{body['id']}" and body["cost_to_date"] == "0.0000"
    token = services.token_of(Workspace.objects.get(pk=body["id"]))
    assert token not in response.content.decode()
    listed = ws_api.get(URL, {"team": team.slug})
    assert [w["name"] for w in listed.json()["results"]] == ["explore"] and token not in listed.content.decode()
    manifest = ws_api.get(f"{URL}{body['id']}/manifest/", {"format": "yaml"})
    assert manifest.status_code == 200 and token not in manifest.content.decode()
    kinds = [item["kind"] for item in yaml.safe_load(manifest.content)["items"]]
    assert kinds == ["PersistentVolumeClaim", "NetworkPolicy", "Deployment", "Service", "Ingress"]


def test_bad_input_is_a_400_with_field_errors(ws_api, team):
    response = ws_api.post(URL, {"team": team.slug, "name": "X", "flavor": "a100-1g.10gb", "home_gb": -1,
                                 "idle_minutes": "soon"}, format="json")
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"name", "home_gb", "idle_minutes"}
    assert not Workspace.objects.exists()


def test_a_refused_admission_is_a_400_on_the_field_to_change(ws_api, team):
    """The kinds' one rule (workloads.services.rejection_errors): past the quota, on ``gpus``; a flavor the
    team has no quota for, on ``flavor``."""
    too_many = ws_api.post(URL, {"team": team.slug, "name": "big", "flavor": "a100-80gb", "gpus": 2}, format="json")
    assert too_many.status_code == 400
    assert "more than the team's limit of 1" in too_many.json()["errors"]["gpus"][0]
    no_quota = ws_api.post(URL, {"team": team.slug, "name": "l4", "flavor": "l4", "gpus": 1}, format="json")
    assert no_quota.status_code == 400 and "no quota for l4" in no_quota.json()["errors"]["flavor"][0]
    assert not Workspace.objects.exists()


def test_a_dry_run_previews_and_writes_nothing(ws_api, team):
    response = ws_api.post(f"{URL}?dry_run=1", {"team": team.slug, "name": "explore", "flavor": "a100-1g.10gb"},
                           format="json")
    assert response.status_code == 200 and response.json()["outcome"] == "admit"
    assert float(response.json()["cost_per_hour"]) > 0
    assert not Workspace.objects.exists()


def test_pause_resume_and_delete(ws_api, create):
    workspace = create()
    paused = ws_api.post(f"{URL}{workspace.pk}/pause/")
    assert paused.status_code == 200 and paused.json()["state"] == "paused"
    assert paused.json()["pause_cause"] == "manual"
    assert ws_api.post(f"{URL}{workspace.pk}/pause/").status_code == 409
    resumed = ws_api.post(f"{URL}{workspace.pk}/resume/")
    assert resumed.status_code == 200 and resumed.json()["state"] == "admitted" and resumed.json()["attempt"] == 2
    deleted = ws_api.delete(f"{URL}{workspace.pk}/")
    assert deleted.status_code == 202 and deleted.json()["state"] == "deleting"
    assert ws_api.delete(f"{URL}{workspace.pk}/").status_code == 409


def test_open_is_for_the_owner_only_and_waits_for_it_to_run(ws_api, create, api_client_for, viewer, outsider):
    workspace = create()
    assert ws_api.get(f"{URL}{workspace.pk}/open/").status_code == 409  # admitted, not running
    assert api_client_for(viewer).get(f"{URL}{workspace.pk}/open/").status_code == 403
    assert api_client_for(outsider).get(f"{URL}{workspace.pk}/open/").status_code == 404


def test_only_the_owner_shares_it(ws_api, create, api_client_for, team_admin):
    workspace = create()
    assert api_client_for(team_admin).post(f"{URL}{workspace.pk}/share/", {"shared_with_admins": True},
                                           format="json").status_code == 403
    shared = ws_api.post(f"{URL}{workspace.pk}/share/", {"shared_with_admins": True}, format="json")
    assert shared.status_code == 200 and shared.json()["shared_with_admins"] is True
    assert ws_api.post(f"{URL}{workspace.pk}/share/", {}, format="json").status_code == 400


def test_the_schema_describes_the_workspaces_api(client):
    schema = yaml.safe_load(client.get("/api/schema/").content)
    paths = schema["paths"]
    for path in ("/api/v1/workspaces/", "/api/v1/workspaces/{id}/", "/api/v1/workspaces/{id}/pause/",
                 "/api/v1/workspaces/{id}/resume/", "/api/v1/workspaces/{id}/open/"):
        assert path in paths, path
    components = schema["components"]["schemas"]
    assert {"Workspace", "Open"} <= set(components)
    assert any(name.startswith("WorkspaceCreate") for name in components)  # the request body
    assert "token" not in str(components["Workspace"]["properties"]).lower()


def test_the_list_costs_the_same_queries_at_any_size(ws_api, team, member):
    seed_team_quotas(team, {"a100-1g.10gb": 8}, None)

    def reads(count: int) -> int:
        while Workspace.objects.count() < count:
            services.create_workspace(member, team, {"name": f"ws{Workspace.objects.count()}",
                                                     "flavor": "a100-1g.10gb"})
        with CaptureQueriesContext(connection) as queries:
            assert len(ws_api.get(URL).json()["results"]) == count
        return len(queries)

    reads(2)  # the first request records the token's use (teams.authentication), later ones do not
    assert reads(2) == reads(6)
