"""The Workspaces page, a workspace's page, the New workspace form and the delete confirmation."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from quotas.demo import seed_team_quotas
from workloads.registry import kind_for
from workspaces import services
from workspaces.constants import WorkspaceState
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db
#: What the Workspaces page reads, whatever the number of workspaces (see the test).
QUERIES = 9


def test_the_list_shows_state_flavor_cost_idle_and_actions(client, member, create, django_assert_max_num_queries):
    running = create(name="running-one")
    paused = create(name="paused-one")
    services.pause_by_user(member, paused)
    client.force_login(member)
    page = client.get(reverse("workspaces:workspace-list"))
    html = page.content.decode()
    assert page.status_code == 200
    assert "running-one" in html and "paused-one" in html and "a100-1g.10gb" in html
    assert f'action="{reverse("workspaces:workspace-pause", args=[running.pk])}"' in html
    assert f'action="{reverse("workspaces:workspace-resume", args=[paused.pk])}"' in html
    assert "saves " in html  # a paused workspace shows what it saves per hour
    assert client.get(reverse("workspaces:workspace-list"), HTTP_HX_REQUEST="true").status_code == 200


def test_the_nav_and_dashboard_know_the_kind(client, member, create):
    create()
    client.force_login(member)
    html = client.get("/").content.decode()
    assert '<a href="/workspaces/">Workspaces</a>' in html
    assert 'id="workspaces-stat"' in html


def test_the_form_creates_or_shows_field_errors(client, member, ws_quota, published):
    client.force_login(member)
    url = reverse("workspaces:workspace-new")
    assert client.get(url).status_code == 200
    refused = client.post(url, {"name": "Bad", "flavor": "a100-1g.10gb", "home_gb": "0"})
    assert refused.status_code == 400 and "Use lowercase letters" in refused.content.decode()
    assert not Workspace.objects.exists()
    created = client.post(url, {"name": "explore", "flavor": "a100-1g.10gb", "home_gb": "30"})
    workspace = Workspace.objects.get()
    assert created.status_code == 302 and created["Location"] == workspace.get_absolute_url()
    assert workspace.home_gb == 30


def test_the_delete_confirmation_names_the_home_volume_and_its_size(client, member, create, viewer):
    workspace = create(home_gb=75)
    client.force_login(member)
    url = reverse("workspaces:workspace-delete", args=[workspace.pk])
    html = client.get(url).content.decode()
    assert "home volume of <strong>75 GB</strong>" in html and "75 GB home volume" in html
    assert client.post(url).status_code == 302
    assert Workspace.objects.get(pk=workspace.pk).state == "deleting"


def test_the_detail_page_and_its_wrong_methods(client, member, create):
    workspace = create()
    client.force_login(member)
    page = client.get(workspace.get_absolute_url())
    html = page.content.decode()
    assert page.status_code == 200 and "20 GB, kept while paused" in html
    # Its actions, as on the list (the page once rendered none: its include was given no row).
    assert f'action="{reverse("workspaces:workspace-pause", args=[workspace.pk])}"' in html
    assert 'id="gpu-telemetry"' in html and 'id="idle-figures"' in html
    assert client.post(workspace.get_absolute_url()).status_code == 405
    assert client.get(reverse("workspaces:workspace-pause", args=[workspace.pk])).status_code == 405


def test_the_status_panel_polls_until_the_workspace_is_final(client, member, create):
    """htmx gets the status panel alone (its reason, start estimate, cost, idle time change with time); once the
    workspace is final the answer is 286, which stops the polling, as on a run's and an endpoint's page."""
    workspace = create()
    client.force_login(member)
    panel = client.get(workspace.get_absolute_url(), headers={"HX-Request": "true"})
    html = panel.content.decode()
    assert panel.status_code == 200 and html.lstrip().startswith('<section class="card status-panel" id="workspace-status"')
    assert f'hx-get="{workspace.get_absolute_url()}"' in html and 'id="gpu-telemetry"' not in html
    Workspace.objects.filter(pk=workspace.pk).update(state=WorkspaceState.DELETED)
    ended = client.get(workspace.get_absolute_url(), headers={"HX-Request": "true"})
    assert ended.status_code == 286 and "hx-get" not in ended.content.decode()


@pytest.mark.parametrize("count", [2, 6])
def test_the_list_costs_the_same_queries_at_any_size(client, member, ws_quota, published, team, count,
                                                     django_assert_num_queries):
    seed_team_quotas(team, {"a100-1g.10gb": 8}, None)
    for index in range(count):
        services.create_workspace(member, team, {"name": f"ws{index}", "flavor": "a100-1g.10gb"})
    client.force_login(member)
    # session + user (2) + the current membership and its check (2) + the rows with their team, flavor and
    # author (1) + their quota holds, their money (1) + one price book for every row (2: clusters, cluster
    # prices) + the navigation's memberships (1)
    with django_assert_num_queries(QUERIES):
        response = client.get(reverse("workspaces:workspace-list"))
    assert response.status_code == 200 and response.content.decode().count('class="badge ') >= count


def test_a_spent_budget_with_the_stop_policy_pauses_it(create):
    workspace = create()
    assert kind_for("ws").on_budget_spent(workspace, timezone.now()) is True
    workspace.refresh_from_db()
    assert (workspace.state, workspace.pause_cause) == ("paused", "budget")
    assert "monthly budget is spent" in workspace.reason and "home volume (20 GB) is kept" in workspace.reason


def test_an_action_goes_back_to_the_page_it_came_from_never_elsewhere(client, member, create):
    workspace = create()
    client.force_login(member)
    pause = reverse("workspaces:workspace-pause", args=[workspace.pk])
    assert client.post(pause, {"next": "/workspaces/"})["Location"] == "/workspaces/"
    resume = reverse("workspaces:workspace-resume", args=[workspace.pk])
    assert client.post(resume, {"next": "https://evil.example.com/"})["Location"] == workspace.get_absolute_url()
