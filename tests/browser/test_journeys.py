"""User journeys in a real browser (Debian chromium via Playwright), on the seeded demo world.

A member cancels a run and creates an inference endpoint (its page shows the replicas chart);
an API token is created (shown once) and revoked; a viewer sees no submit or cancel controls;
the platform admin edits a quota in the admin console and opens the Capacity page; a member
reads the Usage page's charts (their figures checked against the tables beside them) and picks
another month; the platform admin reads the showback page; a team admin adds a member on the
Team page and changes their role, and a member sees that page without its controls; a member
who types another team's namespace into an endpoint's autoscaling query sees why it is refused,
next to the query, and a query naming no namespace comes back with the team's. A missing page
in the demo (DEBUG on) is the portal's own 404; the platform admin follows a Workloads link
to another team's run and reads it; destructive admin actions and the Team page's Remove ask
first; a viewer and a member whose team keeps them from a teammate's run see disabled controls
and why. Every page visited is checked for template syntax shown as text
(tests/browser/support.py). On a failure the page's screenshot and HTML are kept
(the browser fixture, tests/conftest.py).
"""

from __future__ import annotations

import pytest

from inference.models import InferenceEndpoint
from jobs.models import TrainingRun
from jobs.services import cancel_run, submit_run
from quotas.models import TeamQuota
from teams.models import Membership, Team
from tests.browser.support import AN_ENDPOINT_PAGE, BROWSER_MARKS
from tests.jobs.conftest import run_payload

# hx-confirm asks; the user says yes.
pytestmark = [*BROWSER_MARKS, pytest.mark.usefixtures("demo"), pytest.mark.browser_page(accept_dialogs=True)]


def admin_log_in(page, base: str) -> None:
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "slipway-admin")
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/admin/")


def log_in(page, base: str, username: str, password: str = "slipway-demo") -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/{'admin/' if username == 'admin' else ''}*")


def test_a_member_cancels_a_run(live_server, browser):
    log_in(browser, live_server.url, "alice")
    run = TrainingRun.objects.filter(team__slug="ml-research", state="admitted").first()
    browser.goto(f"{live_server.url}/runs/{run.pk}/")
    browser.click("#run-status button.danger")
    browser.wait_for_function("() => document.querySelector('#run-status .badge').innerText === 'Cancelled'")
    run.refresh_from_db()
    assert run.state == "cancelled"


def test_a_member_creates_an_endpoint_and_sees_its_page(live_server, browser):
    log_in(browser, live_server.url, "alice")
    browser.goto(f"{live_server.url}/endpoints/new/")
    browser.select_option("#id_flavor", "a100-1g.10gb")
    browser.wait_for_function("() => document.querySelector('#preview').innerText.includes('Starts now')")
    assert "1/7 of an A100 80GB" in browser.inner_text("#id_flavor")
    browser.fill("#id_name", "summarizer")
    browser.fill("#id_image", "registry.example.com/serving/vllm:0.6")
    browser.fill("#id_max_replicas", "3")
    browser.click("button[type=submit].primary")
    browser.wait_for_url(AN_ENDPOINT_PAGE)
    endpoint = InferenceEndpoint.objects.get(name="summarizer")
    assert browser.inner_text("#endpoint-status .badge") == "Deploying"
    assert browser.locator("#replicas-chart svg polyline").count() == 3  # ready, desired, ceiling
    assert "Admitted at its minimum" in browser.inner_text("#scaling-log")
    browser.goto(f"{live_server.url}/endpoints/")
    assert browser.locator(f"#endpoint-{endpoint.pk}-live").count() == 1


def test_an_api_token_is_shown_once_and_revoked(live_server, browser):
    log_in(browser, live_server.url, "alice")
    browser.goto(f"{live_server.url}/tokens/")
    browser.fill("#id_name", "ci")
    browser.click("button[type=submit].primary")
    token = browser.inner_text("#new-token")
    assert token.startswith("slp_")
    browser.goto(f"{live_server.url}/tokens/")
    assert token not in browser.content()  # shown once
    browser.click("button.danger")
    browser.wait_for_function("() => document.body.innerText.includes('revoked')")


VIEWERS = "Viewers can't submit — ask a team admin."


def test_a_viewer_sees_disabled_submit_and_cancel_controls_and_why(live_server, browser):
    log_in(browser, live_server.url, "carol")
    for path, label in (("/", "New run"), ("/runs/", "New run"), ("/endpoints/", "New endpoint")):
        browser.goto(f"{live_server.url}{path}")
        button = browser.locator(f"button:text('{label}')")
        assert button.is_disabled() and button.get_attribute("title") == VIEWERS, path
        assert browser.inner_text("#submit-refused") == VIEWERS, path
        assert browser.locator(f"a:text('{label}')").count() == 0, path
    for path in ("/runs/new/", "/endpoints/new/"):  # the form itself: shown, disabled, and why
        browser.goto(f"{live_server.url}{path}")
        assert browser.inner_text("#submit-refused") == VIEWERS, path
        assert browser.locator("#id_name").is_disabled()
        assert browser.locator("form.run-form button[type=submit]").is_disabled()
    run = TrainingRun.objects.filter(team__slug="ml-research").exclude(state__in=("succeeded", "failed",
                                                                                   "cancelled")).first()
    browser.goto(f"{live_server.url}/runs/{run.pk}/")
    assert browser.locator("#run-status form button.danger").count() == 0
    assert browser.locator("#run-status button.danger").is_disabled()
    assert "Viewers can't cancel or delete the team's work — ask a team admin." in browser.inner_text("#cancel-refused")


def test_a_member_sees_why_they_may_not_cancel_a_teammates_run(live_server, browser):
    Team.objects.filter(slug="ml-research").update(members_may_cancel_teammates_work=False)
    bob = Membership.objects.get(team__slug="ml-research", user__username="bob").user
    run = submit_run(bob, "ml-research", {**{k: v for k, v in run_payload().items() if k != "team"},
                                          "name": "bobs-run"})
    log_in(browser, live_server.url, "alice")
    browser.goto(f"{live_server.url}/runs/{run.pk}/")
    cancel = browser.locator("#run-status button.danger")
    assert cancel.is_disabled()
    why = "Only ML Research's admins and bob (who started it) may stop it"
    assert why in cancel.get_attribute("title") and why in browser.inner_text("#cancel-refused")
    assert browser.locator("a:text('Run again…')").count() == 1  # a member may still copy it


def test_the_platform_admin_edits_a_quota_and_opens_the_capacity_page(live_server, browser):
    browser.goto(f"{live_server.url}/admin/login/")
    browser.fill("#id_username", "admin")
    browser.fill("#id_password", "slipway-admin")
    browser.click("input[type=submit]")
    quota = TeamQuota.objects.get(team__slug="nlp", flavor__name="h100-80gb")
    browser.goto(f"{live_server.url}/admin/quotas/teamquota/{quota.pk}/change/")
    browser.fill("#id_limit", "12")
    browser.click("input[name=_save]")
    browser.wait_for_url(f"{live_server.url}/admin/quotas/teamquota/")
    quota.refresh_from_db()
    assert quota.limit == 12
    browser.goto(f"{live_server.url}/admin/capacity/")
    assert "h100-80gb" in browser.inner_text("body")


#: In the page: each day's bar segments (from their <title>s: "Nov 3, a100-80gb: 1,234.50 USD") summed per
#: day, beside the table's per-day totals — the chart and its table must say the same.
CHART_AND_TABLE = """(chartId) => {
  const amount = (text) => parseFloat(text.replace(/[^0-9.]/g, ''));
  const bars = {};
  for (const t of document.querySelectorAll(`svg[aria-labelledby="${chartId}-title"] rect.stack title`)) {
    const [day, rest] = t.textContent.split(', ');
    bars[day] = (bars[day] || 0) + amount(rest.split(': ')[1]);
  }
  const table = {};
  for (const row of document.querySelectorAll(`#${chartId}-table tbody tr`)) {
    const cells = row.querySelectorAll('td');
    table[cells[0].textContent.trim()] = amount(cells[cells.length - 1].textContent);
  }
  return {bars, table};
}"""


@pytest.mark.usefixtures("mid_month")  # before the demo: a month's first day has none of its history
def test_a_member_reads_the_usage_charts_and_picks_another_month(live_server, browser):
    log_in(browser, live_server.url, "alice")
    browser.goto(f"{live_server.url}/usage/")
    # The daily chart: stacked segments with patterns, and the same figures as its table.
    assert browser.locator("#daily-chart svg.chart rect.stack").count() >= 1
    figures = browser.evaluate(CHART_AND_TABLE, "daily")
    assert figures["bars"] and set(figures["bars"]) == set(figures["table"])
    for day, total in figures["table"].items():
        assert abs(figures["bars"][day] - total) < 0.02 * len(figures["bars"]), day
    # The burn chart: spent, committed and projected lines against the budget line, with its table.
    assert browser.locator("#burn-chart polyline.series.actual").count() == 1
    assert browser.locator("#burn-chart polyline.series.projected").count() == 1
    assert browser.locator("#burn-chart svg.chart line.budget-line").count() == 1
    assert "20,000.00 USD" in browser.inner_text("#burn-table")
    # By workload: names linking to their pages, costliest first, idle share shown.
    links = browser.locator("#workload-table tbody a")
    assert links.count() >= 5
    costs = [float(c.replace(",", "").split()[0]) for c in browser.locator("#workload-table tbody td:nth-child(4)")
             .all_inner_texts()]
    assert costs == sorted(costs, reverse=True)
    assert "%" in browser.inner_text("#workload-table")
    # Another month from the picker.
    options = browser.locator("#month option")
    earlier = options.nth(1).get_attribute("value")
    browser.select_option("#month", earlier)
    browser.click(".month-picker button[type=submit]")
    browser.wait_for_url(f"**/usage/?month={earlier}")
    assert browser.locator("#burn-chart polyline.series.projected").count() == 0  # a month that is over


@pytest.mark.usefixtures("mid_month")  # before the demo: a month's first day has none of its history
def test_the_platform_admin_reads_the_showback_page(live_server, browser):
    browser.goto(f"{live_server.url}/admin/login/")
    browser.fill("#id_username", "admin")
    browser.fill("#id_password", "slipway-admin")
    browser.click("input[type=submit]")
    browser.goto(f"{live_server.url}/admin/showback/")
    teams = browser.locator("#showback tbody tr").evaluate_all("rows => rows.map(r => r.dataset.team)")
    assert sorted(teams) == ["ml-research", "nlp", "vision"]
    assert browser.locator("#showback-daily-title").count() == 1
    figures = browser.evaluate(CHART_AND_TABLE, "showback-daily")
    assert figures["bars"] and set(figures["bars"]) == set(figures["table"])
    assert "idle GPUs" in browser.inner_text("#showback-total")
    assert browser.locator("#showback-csv").get_attribute("href").endswith("format=csv")


def test_the_dashboard_counters_change_without_a_reload(live_server, browser):
    log_in(browser, live_server.url, "alice")
    browser.goto(f"{live_server.url}/")
    before = int(browser.inner_text("#runs-stat .stat-value"))
    assert before >= 1
    browser.evaluate("() => { window.notReloaded = true; }")
    # Someone cancels an active run elsewhere (the API, another tab): the counter follows.
    run = TrainingRun.objects.filter(team__slug="ml-research", state="admitted").select_related("team").first()
    cancel_run(run.created_by, run)
    browser.wait_for_function(f"() => document.querySelector('#runs-stat .stat-value').innerText === '{before - 1}'")
    assert browser.evaluate("() => window.notReloaded") is True  # swapped in place, not reloaded


def test_the_platform_admin_cancels_another_teams_run_from_the_cross_team_list(live_server, browser):
    admin_log_in(browser, live_server.url)
    run = TrainingRun.objects.filter(team__slug="vision", state="admitted").first()
    browser.goto(f"{live_server.url}/admin/workloads/?state=&team=vision&sort=age")
    row = browser.locator(f'tr[data-ref="{run.ref}"]')
    assert row.locator("td.state").inner_text() == "admitted"
    row.locator("a:text('Cancel…')").click()
    # The click alone only asks, naming the run and its team...
    browser.wait_for_selector("#confirm-action")
    assert f"Cancel run {run.name} (#{run.pk}) of team vision?" in browser.inner_text("#content")
    run.refresh_from_db()
    assert run.state == "admitted"
    # ...and confirming cancels it, back on the filtered list.
    browser.click("#confirm-action input[type=submit]")
    browser.wait_for_selector(f'tr[data-ref="{run.ref}"] td.state:text("cancelled")')
    assert f"Run {run.name} (#{run.pk}) of team vision cancelled." in browser.inner_text(".messagelist")
    run.refresh_from_db()
    assert run.state == "cancelled"


def test_the_platform_admin_follows_a_workloads_link_to_another_teams_run_and_reads_it(live_server, browser):
    admin_log_in(browser, live_server.url)
    run = TrainingRun.objects.filter(team__slug="ml-research", state="admitted").first()
    browser.goto(f"{live_server.url}/admin/workloads/?state=&team=ml-research&sort=age")
    browser.click(f'tr[data-ref="{run.ref}"] th a')
    browser.wait_for_url(f"{live_server.url}/runs/{run.pk}/")
    assert "as platform staff" in browser.inner_text("#staff-reader")
    assert browser.locator("#run-status button").count() == 0  # read, never change
    assert "kind:" in browser.text_content("pre.manifest")
    assert browser.locator("#logs").count() == 1


def test_a_missing_page_in_the_demo_is_the_portals_own_404(live_server, browser):
    log_in(browser, live_server.url, "alice")
    response = browser.goto(f"{live_server.url}/no-such-page/")
    assert response.status == 404
    assert "Page not found" in browser.inner_text("#error-404")
    assert "Using the URLconf" not in browser.content()
    assert browser.locator("nav.mainnav").count() == 1


def test_a_team_admin_adds_a_member_and_changes_the_role_a_member_sees_no_controls(live_server, browser):
    log_in(browser, live_server.url, "bob")
    browser.click("nav.mainnav >> text=Team")
    browser.wait_for_url(f"{live_server.url}/teams/ml-research/")
    browser.fill("#id_username", "dave")
    browser.select_option("#id_role", "member")
    browser.click("#add-member button[type=submit]")
    browser.wait_for_selector("text=dave added as member.")
    dave = Membership.objects.get(team__slug="ml-research", user__username="dave")
    row = browser.locator(f"#member-{dave.pk}")
    assert "Member" in row.inner_text()
    row.locator("select[name=role]").select_option("viewer")
    row.locator("button:text('Change')").click()
    browser.wait_for_selector("text=dave is now viewer.")
    assert "Viewer" in browser.locator(f"#member-{dave.pk}").inner_text()
    dave.refresh_from_db()
    assert dave.role == "viewer"

    browser.click("button:text('Log out')")
    log_in(browser, live_server.url, "alice")
    browser.goto(f"{live_server.url}/teams/ml-research/")
    assert "Viewer" in browser.locator(f"#member-{dave.pk}").inner_text()  # what the admin did, seen by a member
    assert browser.locator("#add-member").count() == 0 and browser.locator("#members select").count() == 0
    assert browser.locator("text=Remove…").count() == 0 and browser.locator("#settings").count() == 0

    browser.click("button:text('Log out')")
    log_in(browser, live_server.url, "bob")
    browser.goto(f"{live_server.url}/teams/ml-research/")
    # Remove asks first: the click alone removes no one; "Keep them" goes back; confirming removes.
    row = browser.locator(f"#member-{dave.pk}")
    row.locator("a:text('Remove…')").click()
    browser.wait_for_selector("#confirm-remove")
    assert "Remove dave from ML Research?" in browser.inner_text("section.card h1")
    assert Membership.objects.filter(pk=dave.pk).exists()
    browser.click("a:text('Keep them')")
    browser.wait_for_url(f"{live_server.url}/teams/ml-research/")
    assert Membership.objects.filter(pk=dave.pk).exists()
    browser.locator(f"#member-{dave.pk} a:text('Remove…')").click()
    browser.click("#confirm-remove button[type=submit]")
    browser.wait_for_selector("text=dave removed from ML Research.")
    assert not Membership.objects.filter(pk=dave.pk).exists()


def test_a_query_reading_another_team_is_refused_next_to_the_query_and_the_team_matcher_is_shown(live_server,
                                                                                                 browser):
    log_in(browser, live_server.url, "alice")
    browser.goto(f"{live_server.url}/endpoints/new/")
    browser.fill("#id_name", "scaler")
    browser.fill("#id_image", "registry.example.com/serving/vllm:0.6")
    browser.select_option("#id_flavor", "a100-1g.10gb")
    browser.select_option("#id_metric", "prometheus")
    browser.fill("#id_target", "4")
    browser.fill("#id_query", 'sum(DCGM_FI_DEV_GPU_UTIL{namespace="team-nlp"})')
    # Leaving the field, as a person does: the preview listens for change and keyup, and a fill alone sends
    # neither (it passed only when an earlier field's preview was still in flight and the query rode along).
    browser.press("#id_query", "Tab")
    # The live preview already says so while typing...
    browser.wait_for_function("() => document.querySelector('#preview').innerText.includes('team-nlp')")
    browser.click("button[type=submit].primary")
    # ...and the refused form says it under the query field, with the user's text kept.
    errors = browser.inner_text("#id_query_errors")
    assert "only read its team's namespace 'team-ml-research', not 'team-nlp'" in errors
    assert browser.input_value("#id_query") == 'sum(DCGM_FI_DEV_GPU_UTIL{namespace="team-nlp"})'
    assert not InferenceEndpoint.objects.filter(name="scaler").exists()
    browser.fill("#id_query", "sum(vllm:num_requests_waiting)")
    browser.click("button[type=submit].primary")
    browser.wait_for_url(AN_ENDPOINT_PAGE)
    endpoint = InferenceEndpoint.objects.get(name="scaler")
    browser.goto(f"{live_server.url}/endpoints/{endpoint.pk}/edit/")
    assert browser.input_value("#id_query") == 'sum(vllm:num_requests_waiting{namespace="team-ml-research"})'
