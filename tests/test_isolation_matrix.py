"""Tenant isolation, route by route, generated from the URL configuration.

Every route of the portal and the API is classified below; a route the table does not know
fails :func:`test_every_route_is_in_the_matrix`, so a new route is covered the day it is added.
For every route that takes an object or a team:

* an outsider (a member of another team) gets 404 and nothing changes;
* a viewer cannot mutate (403) and nothing changes;
* anonymous callers get 401 (API) or the login page (portal);
* a member removed from the team loses access at once, with their token and their session;
* revoked and expired tokens are refused; staff pages refuse everyone else;
* platform staff outside the team read every object route (the admin console links there) and
  change nothing through the portal or the API (404, as for an outsider) — except quota as code
  (docs/api.md): a team's quotas and sharing settings, which only staff change (its members get 403),
  and cohorts, which only staff see (everyone else 404);
* a portal form that names its team in its body offers only the teams the caller may submit work in,
  and refuses another team's slug exactly as a slug no team has (the same form error, nothing
  changed); a viewer gets 403.

What every kind gets from the shared machinery is derived from the registry, so a new kind
(``manage.py startkind``) is in the matrix without a touch here: its read routes
(its page and ``workloads.views.read_urls``': :func:`kind_read_routes`), its API's shared routes with the methods
its viewset answers (:func:`kind_api_routes`) and its create, its list page (its nav item, a route of the
caller's own team), an object of it in the world and its states in the snapshot. The table spells
only the routes a kind adds itself.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
import yaml
from django.db import transaction
from django.test import override_settings
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from rest_framework.test import APIClient

from inference import keys as api_keys
from inference import services as endpoints
from inference.models import ApiKey, InferenceEndpoint
from jobs.models import TrainingRun
from jobs.services import submit_run
from notifications.models import EmailSubscription, Webhook
from notifications.services import create_webhook
from quotas.demo import seed_flavors, seed_team_quotas
from quotas.models import Cohort, TeamQuota, TeamSharing
from reservations.models import CalendarFeed, Reservation
from sweeps import services as sweep_services
from sweeps.models import Sweep, Trial
from teams.models import ApiToken, Membership, Role, Team
from teams.services import create_api_token
from tests.backends import backend_in
from tests.factories import add_member, make_team, make_user
from tests.fakes import FakeBackend
from tests.inference.conftest import endpoint_payload
from tests.jobs.conftest import run_payload
from tests.reservations.support import book_matrix_reservation
from tests.sweeps.support import matrix_sweep
from tests.test_kind_boundaries import project_kinds
from workloads.models import TeamAlertSettings
from workloads.registry import Pages
from workspaces import access
from workspaces import services as workspace_services
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db

# Routes of one object: name → (object kind, methods that read, methods that change it).
RUN, ENDPOINT, WORKSPACE, KEY, RESERVATION, SWEEP = "run", "endpoint", "workspace", "key", "reservation", "sweep"
OBJECT_ROUTES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "jobs:run-cancel": (RUN, (), ("get", "post")),
    "jobs:run-metrics": (RUN, ("get",), ()),
    # People read a run's training metrics; only the run's own token reports them (403 for people).
    "run-metrics": (RUN, ("get",), ("post",)),
    "inference:endpoint-traffic": (ENDPOINT, ("get",), ()),
    "inference:endpoint-edit": (ENDPOINT, (), ("get", "post")),
    "inference:endpoint-delete": (ENDPOINT, (), ("get", "post")),
    "inference:endpoint-promote": (ENDPOINT, (), ("post",)), "inference:endpoint-rollback": (ENDPOINT, (), ("post",)),
    "run-cancel": (RUN, (), ("post",)),
    "endpoint-traffic": (ENDPOINT, ("get",), ()),
    "run-checkpoints": (RUN, (), ("post",)),
    "endpoint-scaling": (ENDPOINT, ("get",), ()), "endpoint-replicas": (ENDPOINT, ("get",), ()),
    "endpoint-cold-starts": (ENDPOINT, ("get",), ()),
    # An endpoint's API keys: its team reads them (staff too), members create them; their usage in money.
    "endpoint-keys": (ENDPOINT, ("get",), ("post",)), "endpoint-keys-usage": (ENDPOINT, ("get",), ()),
    "inference:endpoint-keys": (ENDPOINT, ("get",), ("post",)),
    # A key's buttons (by its id): its team's admins and its creator; viewers 403; anyone else 404.
    "inference:key-revoke": (KEY, (), ("post",)), "inference:key-disable": (KEY, (), ("post",)),
    "inference:key-enable": (KEY, (), ("post",)),
    "endpoint-revisions": (ENDPOINT, ("get",), ()), "endpoint-rollout": (ENDPOINT, (), ("post",)),
    "endpoint-promote": (ENDPOINT, (), ("post",)), "endpoint-rollback": (ENDPOINT, (), ("post",)),
    # Opening hands out the way in: the owner's (a viewer of the team is refused, staff outside it too).
    "workspaces:workspace-open": (WORKSPACE, (), ("get",)),
    "workspaces:workspace-pause": (WORKSPACE, (), ("post",)),
    "workspaces:workspace-resume": (WORKSPACE, (), ("post",)),
    "workspaces:workspace-share": (WORKSPACE, (), ("post",)),
    "workspaces:workspace-delete": (WORKSPACE, (), ("get", "post")),
    "workspace-open": (WORKSPACE, (), ("get",)),
    "workspace-pause": (WORKSPACE, (), ("post",)), "workspace-resume": (WORKSPACE, (), ("post",)),
    "workspace-share": (WORKSPACE, (), ("post",)),
    # A booking: its team reads it (staff too), its members cancel it (DELETE).
    "reservation-detail": (RESERVATION, ("get",), ("delete",)),
    "reservations:cancel": (RESERVATION, (), ("post",)),
    # A sweep: its team reads it and its trials (staff too); its members stop it and delete it once finished.
    "sweep-detail": (SWEEP, ("get",), ("delete",)), "sweep-trials": (SWEEP, ("get",), ()),
    "sweep-stop": (SWEEP, (), ("post",)),
    # Its page (staff read it) and its Stop button: the team's members (viewers 403).
    "sweeps:detail": (SWEEP, ("get",), ()), "sweeps:stop": (SWEEP, (), ("post",)),
    # Continuing a pruned trial (its number in the path): the team's members, by the API and the page.
    "sweep-continue-trial": (SWEEP, (), ("post",)), "sweeps:continue-trial": (SWEEP, (), ("post",)),
}
#: Path arguments beside the object's ``pk`` that a route takes.
ROUTE_ARGUMENTS = {"sweep-continue-trial": {"number": 1}, "sweeps:continue-trial": {"number": 1}}
#: The read routes every kind has, by their names' ends (``<namespace>:<noun>-state``): ``workloads.views.read_urls``'
#: four, and its page, which they link (``workloads.views._route``).
READ_VIEWS = ("detail", "state", "logs", "logs-download", "events")


def kind_read_routes() -> dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """Each kind's page and generated read routes, each read through its access helper: the world's object of its noun.
    A kind's URL namespace is its app label (the kinds' URLconfs say so: ``app_name``)."""
    return {f"{kind.model._meta.app_label}:{kind.noun}-{view}": (kind.noun, ("get",), ())
            for kind in project_kinds() for view in READ_VIEWS}


#: The API routes every kind's viewset has from ``workloads.api.WorkloadViewSet`` (by their names' ends: ``<noun>-events``).
API_VIEWS = ("detail", "logs", "logs-download", "events", "manifest", "telemetry", "preemptions", "attempts")


def api_callbacks() -> dict[str, object]:
    """The API's views by route name (a DRF view knows the methods it answers: ``actions``)."""
    def walk(patterns):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns)
            elif pattern.name:
                yield pattern.name, pattern.callback

    api = next(p for p in get_resolver().url_patterns if isinstance(p, URLResolver) and str(p.pattern) == "api/v1/")
    return dict(walk(api.url_patterns))


def kind_api_routes() -> dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """Each kind's shared API routes, where its viewset has them: what they read (GET), and what else they answer
    (a ``DELETE`` of the kind's own) as a change."""
    callbacks, found = api_callbacks(), {}
    for kind in project_kinds():
        for view in API_VIEWS:
            callback = callbacks.get(f"{kind.noun}-{view}")
            if callback is not None:
                methods = tuple(sorted(set(getattr(callback, "actions", {"get": ""})) - {"head", "options"}))
                found[f"{kind.noun}-{view}"] = (kind.noun, ("get",), tuple(m for m in methods if m != "get"))
    return found


OBJECT_ROUTES = {**kind_read_routes(), **kind_api_routes(), **OBJECT_ROUTES}
#: Routes that take a team (in the path or the body): name → (path, method, body).
TEAM_ROUTES = {
    "team-usage": ("/api/v1/teams/{team}/usage/", "get", None),
    "run-list": ("/api/v1/runs/", "post", lambda team: {**run_payload(), "team": team}),
    "endpoint-list": ("/api/v1/endpoints/", "post", lambda team: {**endpoint_payload(), "team": team}),
    "workspace-list": ("/api/v1/workspaces/", "post", lambda team: {"name": "new", "flavor": "a100-1g.10gb",
                                                                     "team": team}),
    "team-quotas": ("/api/v1/teams/{team}/quotas/", "get", None),
    "team-quota": ("/api/v1/teams/{team}/quotas/a100-80gb/", "put", lambda team: {"limit": 80}),
    "team-sharing-detail": ("/api/v1/teams/{team}/", "patch", lambda team: {"fair_weight": 9}),
    # A team's alert rules: its members read them (tests/workloads/test_alert_settings.py), its admins tighten them.
    "team-alerts": ("/api/v1/teams/{team}/alerts/", "patch", lambda team: {"idle_minutes": 10}),
    # A team's API keys (members create them) and their usage in money.
    "team-keys": ("/api/v1/teams/{team}/keys/", "post", lambda team: {"name": "matrix"}),
    "team-keys-usage": ("/api/v1/teams/{team}/keys/usage/", "get", None),
    # Booking GPU time: the team's members book (viewers 403).
    "reservation-list": ("/api/v1/reservations/", "post", lambda team: {
        "team": team, "flavor": "a100-80gb", "units": 1, "start": "2030-01-07T09:00", "end": "2030-01-07T10:00",
        "name": "matrix"}),
    # A sweep: its team's members create one (viewers 403).
    "sweep-list": ("/api/v1/sweeps/", "post", lambda team: {**matrix_sweep(), "team": team}),
    # A new secret URL of the team's calendar feed: its members make one.
    "reservation-feed": ("/api/v1/reservations/feed/", "post", lambda team: {"team": team}),
}
# A kind's create (``<noun>-list``) the table does not spell: its access is checked before its fields.
TEAM_ROUTES.update({f"{kind.noun}-list": (f"/api/v1/{kind.plural}/", "post", lambda team: {
    "name": "new", "flavor": "a100-80gb", "team": team}) for kind in project_kinds()
    if f"{kind.noun}-list" in api_callbacks() and f"{kind.noun}-list" not in TEAM_ROUTES})
#: What platform staff outside the team get on those: they read its quotas and change its quotas and
#: sharing (quota as code); its usage and its work are its members' (404, as for an outsider).
STAFF_OUTSIDE_THE_TEAM = {"team-usage": 404, "run-list": 404, "endpoint-list": 404, "workspace-list": 404,
                          "team-quotas": 200, "team-quota": 200, "team-sharing-detail": 200, "team-alerts": 404,
                          # Staff read any team's keys and their usage (and revoke them in the admin console only).
                          "team-keys": 404, "team-keys-usage": 200}
STAFF_OUTSIDE_THE_TEAM.update({name: 404 for name in TEAM_ROUTES if name not in STAFF_OUTSIDE_THE_TEAM})  # work
#: API routes of platform staff alone (quota as code, clusters): name → (path, methods). Anyone else: 404.
STAFF_API_ROUTES = {
    "cohort-list": ("/api/v1/cohorts/", ("get",)),
    "cohort-detail": ("/api/v1/cohorts/shared/", ("get", "put", "delete")),
    "cluster-list": ("/api/v1/clusters/", ("get",)),
    "cluster-detail": ("/api/v1/clusters/default/", ("get", "patch")),
    "usage-idle-pools": ("/api/v1/usage/idle-pools/", ("get",)),  # idle pool capacity: nobody's bill
}
#: Portal routes of a team and (``{membership}``) one of its memberships: name → (path, method,
#: body, the role they need). Reading needs a viewer; managing the team needs its admin.
PORTAL_TEAM_ROUTES = {
    "team-detail": ("/teams/{team}/", "get", None, Role.VIEWER),
    "team-member-add": ("/teams/{team}/members/", "post", {"username": "newbie", "role": "admin"}, Role.ADMIN),
    "team-member-role": ("/teams/{team}/members/{membership}/role/", "post", {"role": "admin"}, Role.ADMIN),
    "team-member-remove": ("/teams/{team}/members/{membership}/remove/", "post", None, Role.ADMIN),
    "team-settings": ("/teams/{team}/settings/", "post", None, Role.ADMIN),
    "team-alert-settings": ("/teams/{team}/alerts/", "post", {"idle_minutes": "10"}, Role.ADMIN),
    "notifications": ("/teams/{team}/notifications/", "get", None, Role.VIEWER),
    # Each member's own e-mail choices (viewers too); the team's webhooks are its admins'.
    "notifications-email": ("/teams/{team}/notifications/email/", "post", None, Role.VIEWER),
    "notifications-webhook-add": ("/teams/{team}/notifications/webhooks/", "post",
                                  {"url": "https://hooks.example.com/new", "kinds": ["run_failed"]}, Role.ADMIN),
    "notifications-webhook-delete": ("/teams/{team}/notifications/webhooks/{webhook}/delete/", "post", None,
                                     Role.ADMIN),
    # The team's keys page: its members read it; members create team keys there.
    "inference:team-keys": ("/teams/{team}/keys/", "get", None, Role.VIEWER),
}
#: Portal forms whose body names the team (``team``): name → the body for a slug. The New sweep form and its Preview.
PORTAL_FORM_TEAM_ROUTES = {
    name: lambda team: {"team": team, "name": "matrix-form",
                        "spec": yaml.safe_dump({k: v for k, v in matrix_sweep().items() if k != "name"})}
    for name in ("sweeps:new", "sweeps:preview")}
#: Routes scoped to the caller (their own teams, their own tokens): nothing of another team to reach.
OWN_ROUTES = {"team", "dashboard", "switch-team", "api-tokens", "revoke-api-token", "jobs:run-new",
              "jobs:run-preview", "inference:endpoint-new", "inference:endpoint-preview",
              "usage", "usage-report", "team-list", "flavor-list", "login", "logout", "device-login",
              "api-root",  # the API root: links only, for whoever is signed in
              "flavor-help",  # the flavors everyone may request, as flavor-list (tests/front/test_flavor_help.py)
              # The caller's team, or the runs its query names, each read as its page is (404 outside the
              # team: tests/jobs/test_metric_pages.py).
              "jobs:run-compare",
              "workspaces:workspace-new", "workspaces:workspace-preview",
              # Free reservable units per slot: counts per cluster, no team's bookings (tests/reservations).
              "reservation-availability",
              # The calendar page and its form book for the caller's current team (viewers 403:
              # tests/reservations/test_pages.py).
              "reservations:calendar", "reservations:book", "reservations:preview",
              # The current team's sweeps (tests/sweeps/test_pages.py).
              "sweeps:list"}
OWN_ROUTES |= {Pages.of(kind).nav.url_name for kind in project_kinds() if Pages.of(kind).nav}  # a nav item's page takes no argument
#: The ingress controller's auth-url: it names a workspace in its query (tested below and in tests/workspaces).
AUTH_ROUTES = {"workspaces:workspace-auth"}
#: Single sign-on's flow (front.sso): the provider login and callback, and the deactivated-account page. They
#: hold no team's objects; what they may change (the signing-in person's own memberships) is tests/sso's.
SIGN_IN_ROUTES = {"openid_connect_login", "openid_connect_callback", "account_inactive"}
#: Staff's decisions on one team's object (by its id): everyone else 404 outside the team, 403 inside it.
STAFF_OBJECT_ROUTES = {"reservation-approve": (RESERVATION, "post"), "reservation-decline": (RESERVATION, "post")}
#: Staff-only pages.
STAFF_ROUTES = {"admin-capacity", "admin-showback", "admin-workloads", "admin-workload-end",
                "admin-workload-action", "admin-sso-preview"}
#: Public by design: probes, the API contract, and the command line's sign-in (RFC 8628: the device
#: code is the credential; tests/teams/test_device_login.py).
PUBLIC_ROUTES = {"healthz", "readyz", "api-schema", "api-docs", "auth-device", "auth-token",
                 # A team's calendar feed: its secret URL is the credential (tests/reservations/test_feed.py).
                 "reservations:feed"}


def route_names() -> set[str]:
    def walk(patterns, namespace=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                inner = ":".join(filter(None, (namespace, pattern.namespace)))
                yield from walk(pattern.url_patterns, inner)
            elif isinstance(pattern, URLPattern) and pattern.name:
                yield f"{namespace}:{pattern.name}" if namespace else pattern.name

    return {name for name in walk(get_resolver().url_patterns) if not name.startswith("admin:")}


#: Routes of one API key, under its endpoint (``pk``) or its team (``slug``): name → (methods that read, that change).
KEY_ROUTES = {
    "endpoint-key-detail": (("get",), ("delete",)), "endpoint-key-disable": ((), ("post",)),
    "endpoint-key-enable": ((), ("post",)),
    "team-key-detail": (("get",), ("delete",)), "team-key-disable": ((), ("post",)), "team-key-enable": ((), ("post",)),
}


def test_every_route_is_in_the_matrix():
    known = (set(OBJECT_ROUTES) | set(TEAM_ROUTES) | set(PORTAL_TEAM_ROUTES) | set(PORTAL_FORM_TEAM_ROUTES)
             | OWN_ROUTES | STAFF_ROUTES
             | set(KEY_ROUTES) | set(STAFF_OBJECT_ROUTES)
             | set(STAFF_API_ROUTES) | PUBLIC_ROUTES | SIGN_IN_ROUTES | AUTH_ROUTES)
    assert sorted(route_names() - known) == [], "routes missing from the isolation matrix"
    assert sorted(known - route_names()) == [], "the matrix names routes that no longer exist"


# -- the world: team B owns a run and an endpoint; A's member is the outsider ------------------


@pytest.fixture(scope="module")
def built(django_db_setup, django_db_blocker):
    """The world, built once for the module's tests in a transaction never committed: each test runs in a savepoint
    of it (pytest-django's ``db``), so what a test changes is undone before the next, and the world after the last.

    Built for each test (the people, the quotas and seven objects through their services) it was two thirds of the
    module's time: 67 of 107 s under cProfile on SQLite, for 440 tests. What the tests' fixtures of the same names (below) hand out is read again
    from the database per test, so no test sees another's changes to a Python object either.
    """
    with (django_db_blocker.unblock(), pytest.MonkeyPatch.context() as patch, backend_in(FakeBackend()),
          override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"])):  # as the suite's
        patch.setattr("core.queueing.publish", lambda task, *args, **kwargs: True)  # nothing reaches a broker
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            yield build_world()
        finally:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)


def build_world() -> dict:
    """Team B ("ml-research") owns a run, an endpoint, a workspace, a key, a reservation and a sweep; A's member is the
    outsider; a viewer, an admin and platform staff."""
    flavors = {flavor.name: flavor for flavor in seed_flavors()}
    team, other_team = make_team("ml-research", "ML Research"), make_team("vision", "Vision")
    people = {"member": (team, "mia", Role.MEMBER), "outsider": (other_team, "otto", Role.MEMBER),
              "viewer": (team, "vic", Role.VIEWER), "team_admin": (team, "ada", Role.ADMIN)}
    users = {}
    for role_name, (of, username, role) in people.items():
        users[role_name] = make_user(username)
        add_member(of, users[role_name], role)
    users["staff"] = make_user("sam", staff=True)
    # The suite's ep_quota and quota fixtures, in that order: 8 A100s, 2 L4s, 7 MIG slices.
    seed_team_quotas(team, {"a100-80gb": 4, "a100-1g.10gb": 7}, Decimal("100000"))
    seed_team_quotas(team, {"a100-80gb": 8, "l4": 2}, Decimal("100000"))
    member = users["member"]
    run = submit_run(member, team, {k: v for k, v in run_payload().items() if k != "team"})
    endpoint = endpoints.create_endpoint(member, team, endpoint_payload())
    create_webhook(users["team_admin"], team, "https://hooks.example.com/team", ["run_failed"])
    workspace = workspace_services.create_workspace(member, team, {"name": "explore", "flavor": "a100-1g.10gb"})
    key, _raw = api_keys.create_key(member, team, endpoint, "matrix key")
    reservation = book_matrix_reservation(member, team)
    sweep = sweep_services.create(member, team, matrix_sweep())
    objects = {RUN: run, ENDPOINT: endpoint, WORKSPACE: workspace, KEY: key, RESERVATION: reservation, SWEEP: sweep}
    # A kind the fixture does not submit by its own service (a new one): a row of its own, which its read
    # routes need and admission does not.
    for kind in project_kinds():
        if kind.noun not in objects:
            objects[kind.noun] = kind.model.objects.create(team=team, created_by=member, name="matrix",
                                                           flavor=flavors["a100-80gb"])
    return {"objects": objects, "teams": {"team": team, "other_team": other_team}, "users": users}


def fresh(obj):
    return type(obj).objects.get(pk=obj.pk)


@pytest.fixture
def world(built, db):
    return {noun: fresh(obj) for noun, obj in built["objects"].items()}


@pytest.fixture
def team(built, db):
    return fresh(built["teams"]["team"])


@pytest.fixture
def other_team(built, db):
    return fresh(built["teams"]["other_team"])


@pytest.fixture
def member(built, db):
    return fresh(built["users"]["member"])


@pytest.fixture
def viewer(built, db):
    return fresh(built["users"]["viewer"])


@pytest.fixture
def team_admin(built, db):
    return fresh(built["users"]["team_admin"])


@pytest.fixture
def outsider(built, db):
    return fresh(built["users"]["outsider"])


@pytest.fixture
def staff(built, db):
    return fresh(built["users"]["staff"])


def path_of(name: str, obj) -> str:
    return reverse(name, kwargs={"pk": obj.pk, **ROUTE_ARGUMENTS.get(name, {})})


def snapshot() -> tuple:
    return (sorted(TrainingRun.objects.values_list("pk", "state", "name")),
            sorted(InferenceEndpoint.objects.values_list("pk", "state", "image", "min_replicas", "replica_ceiling")),
            sorted(Membership.objects.values_list("team_id", "user_id", "role")),
            sorted(Team.objects.values_list("pk", "members_may_cancel_teammates_work")),
            sorted(TeamQuota.objects.values_list("team_id", "flavor_id", "limit", "borrowing_limit", "lending_limit")),
            sorted(TeamSharing.objects.values_list("team_id", "cohort_id", "fair_weight", "within_team_preemption")),
            sorted(Cohort.objects.values_list("name", "reclaim", "min_runtime_minutes", "preemption_delay_seconds")),
            sorted(Webhook.objects.values_list("pk", "team_id", "url")),
            sorted(EmailSubscription.objects.values_list("user_id", "team_id", "event_kind")),
            sorted(Workspace.objects.values_list("pk", "state", "shared_with_admins")),
            sorted(TeamAlertSettings.objects.values_list("team_id", "idle_util_pct", "idle_minutes", "memory_pct",
                                                        "memory_minutes")),
            sorted(ApiKey.objects.values_list("pk", "name", "updated_at", "disabled_at", "revoked_at")),
            sorted(Reservation.objects.values_list("pk", "state", "decline_reason")),
            sorted(CalendarFeed.objects.values_list("team_id", "digest")),
            sorted(Sweep.objects.values_list("pk", "state")), sorted(Trial.objects.values_list("pk", "number")),
            *(sorted(kind.model.objects.values_list("pk", "state")) for kind in project_kinds()))


def call(client, method: str, path: str, body=None):
    if method in ("post", "patch", "put") and path.startswith("/api/"):
        return getattr(client, method)(path, body or {"min_replicas": 2}, format="json")
    return getattr(client, method)(path, body or {})


def as_portal_user(user):
    client = APIClient()
    client.force_login(user)
    return client


def as_token(user):
    _token, raw = create_api_token(user, "matrix")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def client_for(name: str, user):
    return as_portal_user(user) if ":" in name else as_token(user)


@pytest.mark.parametrize("name", sorted(OBJECT_ROUTES))
def test_an_outsider_gets_404_and_nothing_changes(world, outsider, name):
    kind, reads, writes = OBJECT_ROUTES[name]
    client, before = client_for(name, outsider), snapshot()
    for method in reads + writes:
        assert call(client, method, path_of(name, world[kind])).status_code == 404, method
    assert snapshot() == before


@pytest.mark.parametrize("name", sorted(OBJECT_ROUTES))
def test_staff_outside_the_team_read_every_object_and_change_nothing(world, staff, name):
    kind, reads, writes = OBJECT_ROUTES[name]
    client, before = client_for(name, staff), snapshot()
    for method in reads:
        assert call(client, method, path_of(name, world[kind])).status_code == 200, method
    for method in writes:
        assert call(client, method, path_of(name, world[kind])).status_code == 404, method
    assert snapshot() == before


def test_an_outsider_cannot_open_the_form_prefilled_with_another_teams_run(world, outsider, viewer):
    """``/runs/new/?from=<id>`` ("Run again") names an object in its query string: same rules."""
    path = f"/runs/new/?from={world[RUN].pk}"
    assert as_portal_user(outsider).get(path).status_code == 404
    assert as_portal_user(viewer).get(path).status_code == 403
    assert "/login/" in APIClient().get(path)["Location"]


@pytest.mark.parametrize("name", sorted(STAFF_OBJECT_ROUTES))
def test_only_staff_decide_and_a_team_of_others_is_a_404(world, member, viewer, team_admin, outsider, name):
    kind, method = STAFF_OBJECT_ROUTES[name]
    path, before = path_of(name, world[kind]), snapshot()
    assert call(as_token(outsider), method, path, {"reason": "no"}).status_code == 404
    for insider in (member, viewer, team_admin):
        assert call(as_token(insider), method, path, {"reason": "no"}).status_code == 403, insider
    assert call(APIClient(), method, path, {"reason": "no"}).status_code == 401
    assert snapshot() == before


@pytest.mark.parametrize("name", sorted(n for n, (_k, _r, writes) in OBJECT_ROUTES.items() if writes))
def test_a_viewer_cannot_mutate(world, viewer, name):
    kind, _reads, writes = OBJECT_ROUTES[name]
    client, before = client_for(name, viewer), snapshot()
    for method in writes:
        assert call(client, method, path_of(name, world[kind])).status_code == 403, method
    assert snapshot() == before


@pytest.mark.parametrize("name", sorted(OBJECT_ROUTES))
def test_anonymous_callers_are_sent_away(world, name):
    kind, reads, writes = OBJECT_ROUTES[name]
    for method in reads + writes:
        response = call(APIClient(), method, path_of(name, world[kind]))
        if ":" in name:
            assert response.status_code in (302, 405) and (response.status_code == 405 or "/login/" in response[
                "Location"]), method
        else:
            assert response.status_code == 401, method


def test_the_auth_url_answers_only_the_owner(world, member, outsider, viewer, staff):
    """The ingress controller's question, by the workspace's own cookie (the portal's Open hands a one-use ticket
    the first question exchanges for it): 200 for the owner, 403 for a teammate, 404 for anyone else (staff
    outside the team too: opening is never a read), 401 without one — the portal's session opens nothing."""
    workspace = world[WORKSPACE]
    Workspace.objects.filter(pk=workspace.pk).update(state="running")
    path = reverse("workspaces:workspace-auth") + f"?workspace={workspace.pk}"

    def exchanged(user) -> int:
        ticket = access.issue_ticket(user, workspace.pk, access.credentials(workspace)[1])
        original = f"https://ws-{workspace.pk}.notebooks.example.com/?{access.TICKET_PARAM}={ticket}"
        return APIClient().get(path, HTTP_X_ORIGINAL_URL=original).status_code

    assert exchanged(member) == 200
    assert exchanged(viewer) == 403
    assert exchanged(outsider) == 404
    assert exchanged(staff) == 404
    assert as_portal_user(member).get(path).status_code == 401
    assert APIClient().get(path).status_code == 401


@pytest.mark.parametrize("name", sorted(TEAM_ROUTES))
def test_a_team_of_others_answers_as_if_it_did_not_exist(world, outsider, viewer, name):
    template, method, body = TEAM_ROUTES[name]
    before = snapshot()
    path = template.format(team="ml-research")
    payload = body("ml-research") if body else None
    assert call(as_token(outsider), method, path, payload).status_code == 404
    if method != "get":
        assert call(as_token(viewer), method, path, payload).status_code == 403
    assert call(APIClient(), method, path, payload).status_code == 401
    assert snapshot() == before


@pytest.mark.parametrize("name", sorted(PORTAL_FORM_TEAM_ROUTES))
def test_a_form_naming_a_team_of_others_refuses_it_as_a_team_that_does_not_exist(world, outsider, viewer, staff, name):
    """The New sweep form and its Preview: an outsider's post of this team is answered as a post of no team at all (400
    on the form, the Preview's fragment saying it), a viewer's is a 403, staff outside the team have no team to
    submit in, an anonymous caller is sent to log in; nothing changes."""
    body, path, before = PORTAL_FORM_TEAM_ROUTES[name], reverse(name), snapshot()
    answers = {}
    for slug in ("ml-research", "no-such-team"):
        response = call(as_portal_user(outsider), "post", path, body(slug))
        assert f"Select a valid choice. {slug} is not one of the available choices." in response.content.decode()
        answers[slug] = response.status_code
    assert answers["ml-research"] == answers["no-such-team"] == {"sweeps:new": 400, "sweeps:preview": 200}[name]
    assert call(as_portal_user(viewer), "post", path, body("ml-research")).status_code == 403
    by_staff = call(as_portal_user(staff), "post", path, body("ml-research"))  # the page sends them to Capacity
    assert by_staff.status_code == {"sweeps:new": 302, "sweeps:preview": 403}[name]
    anonymous = call(APIClient(), "post", path, body("ml-research"))
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    assert snapshot() == before


@pytest.mark.parametrize("path", ["/api/v1/runs/", "/api/v1/endpoints/", "/api/v1/workspaces/"])
def test_a_list_filtered_by_a_team_of_others_is_a_404_not_an_empty_list(world, member, outsider, staff, path):
    """Security review 5 #9c: ``?team=`` of another team answered an empty 200, which reads as "it has none"
    (docs/api.md: a team the caller is not in answers 404, as if it did not exist)."""
    assert as_token(outsider).get(path, {"team": "ml-research"}).status_code == 404
    assert as_token(outsider).get(path, {"team": "no-such-team"}).status_code == 404
    assert as_token(staff).get(path, {"team": "ml-research"}).status_code == 404  # not theirs without all_teams
    ours = as_token(member).get(path, {"team": "ml-research"})
    assert ours.status_code == 200 and ours.json()["count"] >= 1
    assert all(item["team"] == "ml-research" for item in ours.json()["results"])
    everyone = as_token(staff).get(path, {"team": "ml-research", "all_teams": "true"})
    assert everyone.status_code == 200 and everyone.json()["count"] == ours.json()["count"]
    assert as_token(staff).get(path, {"team": "no-such-team", "all_teams": "true"}).status_code == 404


@pytest.mark.parametrize("name", sorted(TEAM_ROUTES))
def test_staff_outside_the_team_change_only_its_quotas_and_sharing(world, staff, name):
    template, method, body = TEAM_ROUTES[name]
    before = snapshot()
    response = call(as_token(staff), method, template.format(team="ml-research"), body("ml-research") if body else None)
    assert response.status_code == STAFF_OUTSIDE_THE_TEAM[name]
    assert (snapshot() != before) == (method != "get" and response.status_code == 200)


@pytest.fixture
def cohort(world, staff, team):
    from quotas.services import set_cohort

    return set_cohort(staff, "shared", teams=[team])


@pytest.mark.parametrize("name", sorted(STAFF_API_ROUTES))
def test_staff_api_routes_answer_404_to_everyone_else(cohort, member, viewer, team_admin, outsider, staff, name):
    path, methods = STAFF_API_ROUTES[name]
    before = snapshot()
    for user in (member, viewer, team_admin, outsider):
        for method in methods:
            assert call(as_token(user), method, path, {"teams": []}).status_code == 404, (user, method)
    for method in methods:
        assert call(APIClient(), method, path, {"teams": []}).status_code == 401, method
    assert snapshot() == before
    assert as_token(staff).get(path).status_code == 200


@pytest.mark.parametrize("name", sorted(n for n in OBJECT_ROUTES if OBJECT_ROUTES[n][1]))
def test_a_removed_member_loses_access_at_once(world, team, name):
    kind, reads, _writes = OBJECT_ROUTES[name]
    leaving = make_user(f"leaving-{abs(hash(name)) % 10**6}")
    add_member(team, leaving, Role.MEMBER)
    client = client_for(name, leaving)
    path = path_of(name, world[kind])
    assert call(client, reads[0], path).status_code == 200
    Membership.objects.filter(user=leaving, team=team).delete()
    assert call(client, reads[0], path).status_code == 404


# -- the Team page and its management routes -------------------------------------------------------


def team_path(name: str, team: Team, membership: Membership) -> str:
    webhook = Webhook.objects.get(team=membership.team)  # the world's: of the membership's team
    return PORTAL_TEAM_ROUTES[name][0].format(team=team.slug, membership=membership.pk, webhook=webhook.pk)


@pytest.fixture
def outside_admin(other_team):
    """An admin — of another team: their role there must not reach this one."""
    user = make_user("olga")
    add_member(other_team, user, Role.ADMIN)
    return user


@pytest.mark.parametrize("name", sorted(PORTAL_TEAM_ROUTES))
def test_an_outsider_gets_404_on_a_teams_page_and_its_management(world, team, member, outside_admin, name):
    make_user("newbie")
    _path, method, body, _role = PORTAL_TEAM_ROUTES[name]
    target, before = Membership.objects.get(user=member), snapshot()
    response = call(as_portal_user(outside_admin), method, team_path(name, team, target), body)
    assert response.status_code == 404
    assert snapshot() == before


@pytest.mark.parametrize("name", sorted(n for n in PORTAL_TEAM_ROUTES
                                         if "{membership}" in PORTAL_TEAM_ROUTES[n][0] or "{webhook}" in PORTAL_TEAM_ROUTES[n][0]))
def test_an_admin_cannot_reach_another_teams_membership_through_their_own_team(world, team, other_team, member,
                                                                              outside_admin, name):
    _path, method, body, _role = PORTAL_TEAM_ROUTES[name]
    target, before = Membership.objects.get(user=member), snapshot()
    response = call(as_portal_user(outside_admin), method, team_path(name, other_team, target), body)
    assert response.status_code == 404
    assert snapshot() == before


@pytest.mark.parametrize("name", sorted(PORTAL_TEAM_ROUTES))
@pytest.mark.parametrize("user_fixture", ["viewer", "member"])
def test_viewers_and_members_read_the_team_page_but_cannot_manage_the_team(request, world, team, member, name,
                                                                          user_fixture):
    make_user("newbie")
    _path, method, body, role = PORTAL_TEAM_ROUTES[name]
    target, before = Membership.objects.get(user=member), snapshot()
    response = call(as_portal_user(request.getfixturevalue(user_fixture)), method, team_path(name, team, target), body)
    # What a viewer may do succeeds: a page (200), or a form that changes nothing here (its redirect).
    assert response.status_code == ({"get": 200, "post": 302}[method] if role == Role.VIEWER else 403)
    assert snapshot() == before


@pytest.mark.parametrize("name", sorted(PORTAL_TEAM_ROUTES))
def test_anonymous_callers_are_sent_to_log_in_from_the_team_routes(world, team, member, name):
    _path, method, body, _role = PORTAL_TEAM_ROUTES[name]
    before = snapshot()
    response = call(APIClient(), method, team_path(name, team, Membership.objects.get(user=member)), body)
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert snapshot() == before


def test_a_removed_member_loses_the_team_page_at_once(world, team):
    leaving = make_user("leaving-team-page")
    add_member(team, leaving, Role.ADMIN)
    client = as_portal_user(leaving)
    assert client.get("/teams/ml-research/").status_code == 200
    Membership.objects.filter(user=leaving, team=team).delete()
    assert client.get("/teams/ml-research/").status_code == 404
    assert client.post("/teams/ml-research/settings/").status_code == 404


def test_revoked_and_expired_tokens_are_refused(world, member):
    _token, raw = create_api_token(member, "old")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    path = f"/api/v1/runs/{world[RUN].pk}/"
    assert client.get(path).status_code == 200
    ApiToken.objects.filter(name="old").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert client.get(path).status_code == 401
    ApiToken.objects.filter(name="old").update(expires_at=None, revoked_at=timezone.now())
    assert client.get(path).status_code == 401


@pytest.mark.parametrize("path", ["/admin/capacity/", "/admin/showback/", "/admin/workloads/", "/admin/sso/preview/",
                                  "/admin/portal/groupmapping/",
                                  "/admin/quotas/teamquota/", "/admin/fleet/gpuflavor/", "/admin/portal/team/",
                                  "/admin/portal/auditevent/"])
def test_staff_pages_refuse_everyone_else(world, member, team_admin, path, staff):
    for user in (member, team_admin):
        response = as_portal_user(user).get(path)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], user
    assert as_portal_user(staff).get(path).status_code == 200


@pytest.mark.parametrize("path", ["/admin/workloads/run/1/end/", "/admin/workloads/ep/1/end/",
                                  "/admin/workloads/ep/1/scale-to-minimum/"])
def test_staff_actions_refuse_everyone_else(world, member, team_admin, path):
    for user in (member, team_admin):
        response = as_portal_user(user).post(path)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], user


# -- API keys: under their endpoint and their team -----------------------------------------------------------


def key_path(name: str, world) -> str:
    key = world["key"]
    if name.startswith("team-"):
        return reverse(name, kwargs={"slug": key.team.slug, "key_pk": key.pk})
    return reverse(name, kwargs={"pk": key.endpoint_id, "key_pk": key.pk})


@pytest.mark.parametrize("name", sorted(KEY_ROUTES))
def test_a_key_of_another_team_is_404_to_outsiders_and_staff_change_none_here(world, outsider, staff, viewer, name):
    reads, writes = KEY_ROUTES[name]
    path, before = key_path(name, world), snapshot()
    for method in reads + writes:
        assert call(client_for(name, outsider), method, path).status_code == 404, method
    for method in reads:
        assert call(client_for(name, staff), method, path).status_code == 200, method
        assert call(client_for(name, viewer), method, path).status_code == 200, method
    for method in writes:
        assert call(client_for(name, staff), method, path).status_code == 404, method
        assert call(client_for(name, viewer), method, path).status_code == 403, method
        response = call(APIClient(), method, path)
        assert response.status_code == 401 if ":" not in name else "/login/" in response["Location"], method
    assert snapshot() == before


def test_a_key_reached_through_another_endpoint_or_team_is_404(world, other_team, member, create_other_endpoint):
    """A key id under an endpoint it is not valid for, or under a team it is not of: as if it did not exist."""
    key, before = world["key"], snapshot()
    client = as_token(member)
    assert client.delete(f"/api/v1/endpoints/{create_other_endpoint.pk}/keys/{key.pk}/").status_code == 404
    assert client.delete(f"/api/v1/teams/{other_team.slug}/keys/{key.pk}/").status_code == 404
    assert snapshot() == before


@pytest.fixture
def create_other_endpoint(world, member, team):
    return endpoints.create_endpoint(member, team, endpoint_payload(name="second"))
