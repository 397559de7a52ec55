"""A team budget is in SLIPWAY_CURRENCY, the currency of every figure it is compared with.

Staff could type any currency on a budget (the team page's inline, the Budgets list): a budget set to EUR
then labelled the team's USD spend, committed money and admission's reasons as EUR. Now no form offers the
choice, the service refuses another currency, what shows a budget says the setting's, and a budget set in
another before is named by the system check ``slipway.W001`` until staff save it again.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core import checks
from django.core.exceptions import ValidationError

from billing.models import TeamBudget
from billing.services import budget_summary
from quotas.admission import admit
from quotas.decide import AdmissionCode, ResourceRequest
from quotas.services import set_team_budget
from teams.models import AuditEvent
from tests.quotas.test_admin import team_form

pytestmark = pytest.mark.django_db


@pytest.fixture
def euro_budget(quota_team):
    """A budget staff set to EUR before the choice was gone (the portal's currency is USD)."""
    return TeamBudget.objects.create(team=quota_team, monthly_limit=Decimal("100.00"), currency="EUR")


def budget_warnings() -> list[checks.CheckMessage]:
    return [m for m in checks.run_checks(tags=[checks.Tags.database], databases=["default"]) if m.id == "slipway.W001"]


def test_the_team_page_offers_no_currency_and_saves_the_settings(staff_client, quota_team, no_broker):
    page = staff_client.get(f"/admin/portal/team/{quota_team.pk}/change/").content.decode()
    assert "budget-__prefix__-monthly_limit" in page and "budget-__prefix__-currency" not in page
    response = staff_client.post(f"/admin/portal/team/{quota_team.pk}/change/", team_form(
        quota_team, list(quota_team.quotas.order_by("pk")),
        budget={"monthly_limit": "500.00", "currency": "EUR", "alert_threshold_percent": 80, "policy": "notify"}))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert TeamBudget.objects.get(team=quota_team).currency == "USD"


def test_the_budgets_list_adds_a_budget_in_the_settings_currency(staff_client, quota_team, no_broker):
    assert 'name="currency"' not in staff_client.get("/admin/billing/teambudget/add/").content.decode()
    response = staff_client.post("/admin/billing/teambudget/add/", {
        "team": quota_team.pk, "monthly_limit": "300.00", "currency": "EUR", "alert_threshold_percent": 80,
        "policy": "notify"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert TeamBudget.objects.get(team=quota_team).currency == "USD"


def test_the_service_refuses_another_currency_and_writes_nothing(staff, quota_team, no_broker):
    with pytest.raises(ValidationError) as refused:
        set_team_budget(staff, quota_team, Decimal("500"), "EUR")
    assert refused.value.message_dict["currency"] == [
        "A budget is in USD (SLIPWAY_CURRENCY), the currency of the spend it is compared with: 'EUR' cannot be set."]
    assert not TeamBudget.objects.filter(team=quota_team).exists()
    assert set_team_budget(staff, quota_team, Decimal("500"), "USD").currency == "USD"  # saying so is fine


def test_a_budget_set_in_another_currency_shows_and_decides_in_the_settings(
        api, staff_client, member, quota_team, euro_budget):
    assert budget_summary(quota_team)["currency"] == "USD"
    assert api.get(f"/api/v1/teams/{quota_team.slug}/usage/").json()["budget"]["currency"] == "USD"
    # Admission's reason, from its own statement's read of the budget: a limit of 1.00, which any A100-hour passes.
    TeamBudget.objects.filter(pk=euro_budget.pk).update(monthly_limit=Decimal("1.00"))
    request = ResourceRequest("a100-80gb", 1, 1, estimated_cost=Decimal("41"), cost_per_hour=Decimal("4.10"),
                              committed_units=1, limit_minutes=600)
    decision = admit(quota_team, request, "run:1")
    assert decision.reason.code == AdmissionCode.WAITING_FOR_BUDGET, decision.reason.words
    assert "1.00 USD left" in decision.reason.words and "EUR" not in decision.reason.words
    listing = staff_client.get("/admin/billing/teambudget/").content.decode()
    assert "1.00 USD" in listing and "EUR" not in listing


def test_the_check_names_a_budget_set_in_another_currency_until_it_is_saved(staff, quota_team, euro_budget,
                                                                            no_broker):
    [warning] = budget_warnings()
    assert "team ml-research" in warning.msg and "100.0000 EUR" in warning.msg and "in USD" in warning.msg
    set_team_budget(staff, quota_team, Decimal("100.00"))  # staff reviewed the limit and saved it
    assert TeamBudget.objects.get(team=quota_team).currency == "USD"
    assert budget_warnings() == []
    event = AuditEvent.objects.get(action=AuditEvent.Action.BUDGET_CHANGED)
    assert (event.details["old"]["currency"], event.details["new"]["currency"]) == ("EUR", "USD")
