"""An endpoint's ``autoscale.query`` reads its own team's series only (issue 21, point 1).

The security review's cross-team reads and load levers, through every door a user has — the
API's POST and PATCH, and the portal's create and edit forms: each is a 400 (a form error next
to the query field) that writes nothing, and a query naming no namespace is stored, shown and
rendered with the team's namespace matcher on every selector. The rule itself is table-tested
in ``tests/cluster/test_promql.py``.
"""

from __future__ import annotations

import importlib
from decimal import Decimal

import pytest
from django.apps import apps

from billing.models import QuotaHold
from inference import services
from inference.models import InferenceEndpoint
from quotas.demo import seed_team_quotas
from sandbox.models import SimObject
from teams.models import AuditEvent
from tests.inference.conftest import endpoint_payload
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db

NS = "team-ml-research"  # the team fixture's namespace

#: (query, part of the answer): what the review sent, and what each is refused for.
CROSS_TEAM = [
    ('sum(DCGM_FI_DEV_GPU_UTIL{namespace="team-nlp"})', "not 'team-nlp'"),
    ('sum(DCGM_FI_DEV_GPU_UTIL{namespace="team-vision"})', "not 'team-vision'"),  # a real other team
    ('count({__name__=~".+"})', "__name__"),
    ("sum(rate(vllm:request_success_total[1h]))", "at most 10m"),
    ('sum(x{namespace=~"team-.*"})', "matched exactly"),
    ('sum(x{namespace!="team-ml-research"})', "matched exactly"),
    ('sum(x) / sum(y{namespace="team-nlp"})', "not 'team-nlp'"),
    ("sum(", "Not valid PromQL"),
    ("x" * 1001, "At most 1000 characters"),
]
#: (query, what is stored): a selector in a binary operation and one in a subquery get the matcher.
INJECTED = [
    ("sum(vllm:num_requests_waiting)", f'sum(vllm:num_requests_waiting{{namespace="{NS}"}})'),
    ("sum(rate(vllm:request_success_total[5m])) / max_over_time(sum(vllm:num_requests_running)[5m:30s])",
     f'sum(rate(vllm:request_success_total{{namespace="{NS}"}}[5m])) / '
     f'max_over_time(sum(vllm:num_requests_running{{namespace="{NS}"}})[5m:30s])'),
]
IDS = [q[:40] for q, _ in CROSS_TEAM]


def prometheus(query: str, target: float = 4) -> dict:
    return {"metric": "prometheus", "target": target, "query": query}


def post(client, query: str, **overrides):
    payload = {"team": "ml-research", **endpoint_payload(autoscale=prometheus(query), **overrides)}
    return client.post("/api/v1/endpoints/", payload, format="json")


def query_of(trigger_objects: list[dict]) -> str:
    [scaled] = [o for o in trigger_objects if o["kind"] == "ScaledObject"]
    return scaled["spec"]["triggers"][0]["metadata"]["query"]


# -- API: POST ------------------------------------------------------------------------------


@pytest.mark.parametrize(("query", "reason"), CROSS_TEAM, ids=IDS)
def test_post_refuses_a_query_beyond_the_team_with_a_400_and_writes_nothing(api, ep_quota, published, query, reason):
    response = post(api, query)
    assert response.status_code == 400, response.json()
    messages = response.json()["errors"]["autoscale"]
    assert any(m.startswith("query: ") and reason in m for m in messages), messages
    assert not InferenceEndpoint.objects.exists() and not QuotaHold.objects.exists()
    assert not AuditEvent.objects.filter(action="endpoint_created").exists()
    assert published == []


@pytest.mark.parametrize(("query", "scoped"), INJECTED)
def test_post_stores_shows_and_renders_the_query_with_the_team_matcher(api, ep_quota, published, query, scoped):
    response = post(api, query)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["autoscale"] == prometheus(scoped)
    assert InferenceEndpoint.objects.get(pk=body["id"]).autoscale["query"] == scoped
    assert api.get(f"/api/v1/endpoints/{body['id']}/").json()["autoscale"]["query"] == scoped
    manifest = api.get(f"/api/v1/endpoints/{body['id']}/manifest/").json()
    assert query_of(manifest) == scoped


def test_the_dry_run_answers_the_same_refusal(api, ep_quota):
    response = api.post("/api/v1/endpoints/?dry_run=1", {
        "team": "ml-research", **endpoint_payload(autoscale=prometheus('count({__name__=~".+"})'))}, format="json")
    assert response.status_code == 400 or response.json().get("outcome") == "invalid", response.json()
    assert not InferenceEndpoint.objects.exists()


# -- API: PATCH -----------------------------------------------------------------------------


@pytest.fixture
def endpoint(member, team, ep_quota, published):
    return services.create_endpoint(member, team, endpoint_payload(
        min_replicas=0, autoscale=prometheus("sum(vllm:num_requests_waiting)")))


@pytest.mark.parametrize(("query", "reason"), CROSS_TEAM, ids=IDS)
def test_patch_refuses_a_query_beyond_the_team_and_changes_nothing(api, endpoint, published, query, reason):
    before = dict(endpoint.autoscale)
    published.clear()
    response = api.patch(f"/api/v1/endpoints/{endpoint.pk}/", {"autoscale": prometheus(query)}, format="json")
    assert response.status_code == 400, response.json()
    assert any(reason in m for m in response.json()["errors"]["autoscale"])
    endpoint.refresh_from_db()
    assert endpoint.autoscale == before
    assert published == []  # nothing re-applied


@pytest.mark.parametrize(("query", "scoped"), INJECTED)
def test_patch_stores_the_query_with_the_team_matcher(api, endpoint, query, scoped):
    response = api.patch(f"/api/v1/endpoints/{endpoint.pk}/", {"autoscale": prometheus(query, 8)}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["autoscale"] == prometheus(scoped, 8)
    endpoint.refresh_from_db()
    assert endpoint.autoscale["query"] == scoped
    assert query_of(api.get(f"/api/v1/endpoints/{endpoint.pk}/manifest/").json()) == scoped


def test_a_query_of_another_team_is_refused_for_its_own_namespace_only(api_client_for, outsider, other_team,
                                                                         member, team, ep_quota, published):
    """The rule is per team: what is refused for ml-research is the vision team's own query."""
    seed_team_quotas(other_team, {"a100-80gb": 4}, Decimal("10000"))
    query = f'sum(DCGM_FI_DEV_GPU_UTIL{{namespace="{other_team.namespace}"}})'
    theirs = api_client_for(outsider).post("/api/v1/endpoints/", {
        "team": other_team.slug, **endpoint_payload(autoscale=prometheus(query))}, format="json")
    assert theirs.status_code == 201, theirs.json()
    assert theirs.json()["autoscale"]["query"] == query
    ours = api_client_for(member).post("/api/v1/endpoints/", {
        "team": team.slug, **endpoint_payload(autoscale=prometheus(query))}, format="json")
    assert ours.status_code == 400


# -- the portal's forms ---------------------------------------------------------------------

FORM = {"name": "chat", "image": "registry.example.com/serving/vllm:0.6", "flavor": "a100-80gb",
        "gpus_per_replica": "1", "min_replicas": "0", "max_replicas": "3", "metric": "prometheus",
        "target": "4", "scale_down_delay_seconds": "300", "port": "8080", "readiness_path": "/health/ready",
        "startup_timeout_seconds": "600"}


def query_errors(response) -> list[str]:
    return list(response.context["form"].errors.get("query", []))


@pytest.mark.parametrize(("query", "reason"), CROSS_TEAM[:-1], ids=IDS[:-1])
def test_the_create_form_shows_the_refusal_next_to_the_query(client, member, ep_quota, published, query, reason):
    client.force_login(member)
    response = client.post("/endpoints/new/", {**FORM, "query": query})
    assert response.status_code == 400
    assert any(reason in e for e in query_errors(response)), response.context["form"].errors
    assert reason.replace("'", "&#x27;") in response.content.decode()
    assert not InferenceEndpoint.objects.exists()


def test_the_create_form_refuses_an_over_long_query_on_its_field(client, member, ep_quota, published):
    client.force_login(member)
    response = client.post("/endpoints/new/", {**FORM, "query": "x" * 1001})
    assert response.status_code == 400
    assert any("1000" in e for e in query_errors(response))
    assert not InferenceEndpoint.objects.exists()


@pytest.mark.parametrize(("query", "scoped"), INJECTED)
def test_the_create_form_stores_the_scoped_query(client, member, ep_quota, published, query, scoped):
    client.force_login(member)
    response = client.post("/endpoints/new/", {**FORM, "query": query})
    assert response.status_code == 302, response.context["form"].errors
    assert InferenceEndpoint.objects.get().autoscale["query"] == scoped


@pytest.mark.parametrize(("query", "reason"), CROSS_TEAM[:-1], ids=IDS[:-1])
def test_the_edit_form_shows_the_refusal_and_changes_nothing(client, member, endpoint, query, reason):
    client.force_login(member)
    before = dict(endpoint.autoscale)
    response = client.post(f"/endpoints/{endpoint.pk}/edit/", {
        "image": endpoint.image, "min_replicas": "0", "max_replicas": "4", "metric": "prometheus", "target": "4",
        "query": query, "scale_down_delay_seconds": "300", "env": ""})
    assert response.status_code == 400
    assert any(reason in e for e in query_errors(response)), response.context["form"].errors
    endpoint.refresh_from_db()
    assert endpoint.autoscale == before


def test_the_edit_form_shows_the_stored_query_and_saving_it_again_keeps_it(client, member, endpoint):
    """What the form shows is the canonical query; re-submitting it is a no-op (a fixed point)."""
    client.force_login(member)
    scoped = endpoint.autoscale["query"]
    page = client.get(f"/endpoints/{endpoint.pk}/edit/")
    assert page.context["form"]["query"].value() == scoped
    response = client.post(f"/endpoints/{endpoint.pk}/edit/", {
        "image": endpoint.image, "min_replicas": "0", "max_replicas": "4", "metric": "prometheus", "target": "6",
        "query": page.context["form"]["query"].value(), "scale_down_delay_seconds": "300", "env": ""})
    assert response.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.autoscale == prometheus(scoped, 6)


# -- queries stored before the rule -----------------------------------------------------------


def test_the_migration_scopes_stored_queries_and_retires_the_ones_the_rule_refuses(endpoint, member, team, caplog):
    """Rows written before the rule (set here without validation, as the old code stored them)."""
    migration = importlib.import_module("inference.migrations.0003_scope_autoscale_queries")
    legacy = services.create_endpoint(member, team, endpoint_payload(name="legacy", min_replicas=0,
                                                                      autoscale=prometheus("sum(x)")))
    InferenceEndpoint.objects.filter(pk=endpoint.pk).update(autoscale=prometheus("sum(rate(vllm:x[5m]))", 3))
    InferenceEndpoint.objects.filter(pk=legacy.pk).update(
        autoscale=prometheus('sum(DCGM_FI_DEV_GPU_UTIL{namespace="team-nlp"})', 50))
    with caplog.at_level("WARNING", logger="inference"):
        migration.scope_stored_queries(apps, None)  # the live registry stands in for the migration's
    endpoint.refresh_from_db()
    legacy.refresh_from_db()
    assert endpoint.autoscale == prometheus(f'sum(rate(vllm:x{{namespace="{NS}"}}[5m]))', 3)
    assert legacy.autoscale == {"metric": "requests_per_second", "target": 50}
    assert f"endpoint {legacy.pk} (legacy, team ml-research)" in caplog.text


# -- the second wall: a label-enforcing proxy --------------------------------------------------

PROXY_URL = "http://slipway-prometheus-proxy.slipway-system.svc:8080"


def test_with_the_proxy_setting_the_cluster_gets_the_tenant_and_the_trigger_uses_it(settings, endpoint):
    """Applied to the simulated cluster: the team namespace holds the tenant, the trigger references it."""
    settings.SLIPWAY_PROMETHEUS_PROXY_URL = PROXY_URL
    assert apply_workload("ep", endpoint.pk) == "applied"
    stored = {(o.resource_kind, o.name): o.manifest for o in SimObject.objects.filter(namespace=NS)}
    assert stored[("ConfigMap", "slipway-prometheus-tenant")]["data"] == {"header": "X-Slipway-Namespace",
                                                                         "namespace": NS}
    tenant = stored[("TriggerAuthentication", "slipway-prometheus-tenant")]["spec"]["configMapTargetRef"]
    assert {ref["parameter"] for ref in tenant} == {"customAuthHeader", "customAuthValue"}
    # The endpoint may sleep at zero: the gateway's wake-up trigger follows its own, through the tenant too.
    [trigger, wake] = stored[("ScaledObject", endpoint.object_name)]["spec"]["triggers"]
    assert trigger["authenticationRef"] == wake["authenticationRef"] == {"name": "slipway-prometheus-tenant"}
    assert trigger["metadata"]["serverAddress"] == wake["metadata"]["serverAddress"] == PROXY_URL
    assert trigger["metadata"]["query"] == f'sum(vllm:num_requests_waiting{{namespace="{NS}"}})'


def test_without_the_proxy_setting_nothing_of_it_is_applied(settings, endpoint):
    settings.SLIPWAY_PROMETHEUS_PROXY_URL = ""
    assert apply_workload("ep", endpoint.pk) == "applied"
    assert not SimObject.objects.filter(resource_kind__in=["ConfigMap", "TriggerAuthentication"]).exists()
    for trigger in SimObject.objects.get(resource_kind="ScaledObject", name=endpoint.object_name).manifest["spec"]["triggers"]:
        assert "authenticationRef" not in trigger
        assert trigger["metadata"]["serverAddress"] == settings.SLIPWAY_PROMETHEUS_URL


def test_the_dry_run_and_the_submission_refuse_a_retired_flavor_in_the_same_words(api, ep_quota):
    """Both ask GpuFlavor.usable; the dry run used to call a retired flavor unknown."""
    from fleet.models import GpuFlavor

    GpuFlavor.objects.filter(name="a100-80gb").update(active=False)
    words = ["Flavor a100-80gb is retired and cannot be requested any more."]
    for url in ("/api/v1/endpoints/?dry_run=1", "/api/v1/endpoints/"):
        response = api.post(url, {"team": "ml-research", **endpoint_payload()}, format="json")
        assert response.status_code == 400, response.json()
        assert response.json()["errors"]["flavor"] == words, response.json()
    assert not InferenceEndpoint.objects.exists()
