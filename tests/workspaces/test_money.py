"""What a workspace costs, shown one way (issue 46): ``cost_per_hour`` by state, one rounding of money per
hour on its pages, and the New workspace form's live preview (the New run form's panel)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from core.formatting import format_money, format_rate
from workspaces import services
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


def test_a_paused_workspace_costs_nothing_per_hour_and_says_what_running_costs(client, member, create):
    running = create(name="running-one")
    paused = create(name="paused-one")
    services.pause_by_user(member, paused)
    rate = running.price_quote().price  # 1 unit: its cost per hour while it runs
    client.force_login(member)
    answers = {w["name"]: w for w in client.get("/api/v1/workspaces/").json()["results"]}
    assert Decimal(answers["paused-one"]["cost_per_hour"]) == 0  # it holds no GPU: was 0.5857 (its running rate)
    assert Decimal(answers["paused-one"]["running_cost_per_hour"]) == rate
    assert Decimal(answers["running-one"]["cost_per_hour"]) == Decimal(answers["running-one"]["running_cost_per_hour"]) == rate
    page = client.get(Workspace.objects.get(pk=paused.pk).get_absolute_url()).content.decode()
    assert f"0.00 USD now · {format_rate(rate)} while it runs — saved while paused" in page


def test_money_per_hour_has_one_rounding_on_a_workspace_page(client, member, create):
    """A MIG slice: its unit price needs four decimals, and its cost per hour is written the same way (the
    page once wrote 0.59 beside 0.5857)."""
    workspace = create()
    price = workspace.price_quote().price
    assert price != price.quantize(Decimal("0.01"))  # a price cents would round
    client.force_login(member)
    page = client.get(workspace.get_absolute_url()).content.decode()
    assert f"{price} USD/h" in page and f"{price} USD now" in page
    assert f"{price.quantize(Decimal('0.01'))} USD" not in page


def test_the_new_workspace_form_previews_price_budget_and_start_as_the_new_run_form(client, member, ws_quota, team,
                                                                                  monkeypatch):
    # One moment for the page and the test's own preview: the cost to the month's end moves a cent every few seconds
    # (at 4.10 USD/h), and the two, read a moment apart, once straddled a cent (CI, 2026-11-30).
    moment = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: moment)
    client.force_login(member)
    form = client.get(reverse("workspaces:workspace-new")).content.decode()
    assert 'hx-post="/workspaces/preview/"' in form and 'id="preview-price"' in form
    url = reverse("workspaces:workspace-preview")
    answer = client.post(url, {"name": "explore", "flavor": "a100-80gb", "gpus": "1"}).content.decode()
    preview = services.preview_workspace(team, {"name": "explore", "flavor": "a100-80gb", "gpus": 1})
    assert f"<strong>{format_rate(preview.cost_per_hour)}</strong> per hour" in answer
    assert f"A unit: {preview.price_words}" in answer and "Starts now" in answer
    # No end, so no "at most … in all": what the budget counts, to the month's end (its committed cost).
    assert preview.estimated_total_cost is None and preview.open_ended
    assert f"<strong>{format_money(preview.committed_cost)}</strong> to the month's end" in answer
    assert "At most" not in answer and "A runtime limit counts less" not in answer
    # The run form's panel, the same partial: the same price words for the same flavor.
    run_panel = client.post(reverse("jobs:run-preview"), {"flavor": "a100-80gb", "gpus_per_worker": "1", "workers": "1",
                                                            "name": "x", "image": "busybox"}).content.decode()
    assert f"A unit: {preview.price_words}" in run_panel
    refused = client.post(url, {"flavor": "a100-80gb", "gpus": "99"}).content.decode()
    assert "gpus" in refused or "Rejected" in refused or "Will queue" in refused
    bad = client.post(url, {"flavor": "a100-80gb", "home_gb": "0"}).content.decode()
    assert "home_gb:" in bad
    assert not Workspace.objects.exists()
