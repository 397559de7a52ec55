"""The Notifications page and the Team page's delivery log: who may do what, and bad input.

Members (any role) set their own e-mail; only the team's admins see and change its webhooks;
anyone outside the team gets 404 for all of it; refused input is a 400 with the error by its field.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from notifications import delivery, events
from notifications.constants import EventKind
from notifications.models import Delivery, EmailSubscription, Webhook
from notifications.services import create_webhook
from teams.models import AuditEvent, Role
from tests.factories import add_member, make_user

pytestmark = pytest.mark.django_db

PAGE = "/teams/ml-research/notifications/"
EMAIL = PAGE + "email/"
HOOKS = PAGE + "webhooks/"


def login(client, user):
    client.force_login(user)
    return client


def add_hook(client, url="https://hooks.example.com/x", kinds=("run_failed",)):
    return client.post(HOOKS, {"url": url, "kinds": list(kinds)})


def test_a_member_subscribes_to_e_mail_and_unsubscribes(client, member, team):
    login(client, member)
    assert client.get(PAGE).status_code == 200
    response = client.post(EMAIL, {"kinds": ["run_failed", EventKind.BUDGET_ALERT]})
    assert response.status_code == 302 and response.url == PAGE
    assert sorted(EmailSubscription.objects.filter(user=member, team=team).values_list("event_kind", flat=True)) == [
        "budget_alert", "run_failed"]
    assert re.search(r'value="run_failed" id="id_kinds_\d+" checked', client.get(PAGE).content.decode())
    client.post(EMAIL, {})
    assert not EmailSubscription.objects.exists()


def test_a_viewer_manages_their_own_e_mail_but_sees_no_webhooks(client, viewer, team, team_admin):
    create_webhook(team_admin, team, "https://hooks.example.com/secret-path", ["run_failed"])
    login(client, viewer)
    html = client.get(PAGE).content.decode()
    assert "secret-path" not in html and "Add a webhook" not in html
    assert client.post(EMAIL, {"kinds": ["run_succeeded"]}).status_code == 302
    assert add_hook(client).status_code == 403


def test_an_unknown_kind_or_no_address_is_a_400_next_to_the_field(client, member):
    login(client, member)
    response = client.post(EMAIL, {"kinds": ["run_exploded"]})
    assert response.status_code == 400
    assert "Select a valid choice. run_exploded is not one of the available choices." in response.content.decode()
    member.email = ""
    member.save(update_fields=["email"])
    response = client.post(EMAIL, {"kinds": ["run_failed"]})
    assert response.status_code == 400 and "Your account has no e-mail address" in response.content.decode()
    assert not EmailSubscription.objects.exists()


def test_an_admin_adds_a_webhook_and_sees_its_secret_once(client, team_admin, team):
    login(client, team_admin)
    response = add_hook(client, kinds=("run_failed", EventKind.PREEMPTED))
    assert response.status_code == 201 and response["Cache-Control"].startswith("max-age=0")
    hook = Webhook.objects.get()
    html = response.content.decode()
    secret = html.split('<pre class="token">')[1].split("</pre>")[0]
    assert secret.startswith(hook.secret_prefix) and delivery.webhook_secret(hook) == secret
    assert (hook.team, hook.event_kinds) == (team, ["preempted", "run_failed"])
    assert secret not in client.get(PAGE).content.decode()  # shown once
    assert AuditEvent.objects.filter(action=AuditEvent.Action.TEAM_SETTINGS_CHANGED,
                                     target=f"webhook {hook.pk}").exists()


@pytest.mark.parametrize(("url", "words"), [
    ("ftp://hooks.example.com/x", "Only http:// and https:// URLs can be webhooks."),
    ("http://10.0.0.5/hook", "Slipway does not post to internal addresses: 10.0.0.5 is a loopback, link-local"),
    ("http://169.254.169.254/latest", "Slipway does not post to internal addresses"),
    ("http://metadata.google.internal/", "is a cloud metadata service"),
    ("https://slipway-web.slipway-system.svc/x", "is a cluster-internal or private-use name"),
    ("http://user:pw@hooks.example.com/", "Leave user names and passwords out of the URL"),
    ("http://hooks.example.com:99999/", "Enter a valid URL."),
    ("not a url", "Only http:// and https:// URLs can be webhooks."),
    ("https:///nohost", "Enter a URL with a host name."),
])
def test_a_bad_or_internal_url_is_refused_with_a_400(client, team_admin, url, words):
    login(client, team_admin)
    response = add_hook(client, url=url)
    assert response.status_code == 400
    assert words in response.content.decode()
    assert not Webhook.objects.exists()


def test_no_kind_is_refused_and_loopback_only_with_the_setting(client, team_admin, settings):
    login(client, team_admin)
    response = add_hook(client, kinds=())
    assert response.status_code == 400 and "This field is required." in response.content.decode()
    settings.SLIPWAY_WEBHOOK_ALLOW_LOOPBACK = False
    response = add_hook(client, url="http://127.0.0.1:8080/hook")
    assert response.status_code == 400 and "127.0.0.1:8080 is a loopback" in response.content.decode()
    settings.SLIPWAY_WEBHOOK_ALLOW_LOOPBACK = True
    assert add_hook(client, url="http://127.0.0.1:8080/hook").status_code == 201


def test_members_may_not_change_webhooks_and_outsiders_get_404(client, member, outsider, team, team_admin):
    hook, _ = create_webhook(team_admin, team, "https://hooks.example.com/x", ["run_failed"])
    delete = f"{HOOKS}{hook.pk}/delete/"
    login(client, member)
    assert add_hook(client).status_code == 403
    assert client.post(delete).status_code == 403
    login(client, outsider)
    for response in (client.get(PAGE), client.post(EMAIL, {"kinds": ["run_failed"]}), add_hook(client),
                     client.post(delete), client.post(f"/teams/vision/notifications/webhooks/{hook.pk}/delete/")):
        assert response.status_code == 404
    assert Webhook.objects.count() == 1 and not EmailSubscription.objects.exists()


def test_an_admin_deletes_a_webhook_and_its_log_stays(client, team_admin, team):
    hook, _ = create_webhook(team_admin, team, "https://hooks.example.com/x", ["run_failed"])
    delivery.fan_out(events.record("run_failed", team, "k1", "Run failed", "Run failed."))
    login(client, team_admin)
    assert client.get(f"{HOOKS}{hook.pk}/delete/").status_code == 405
    response = client.post(f"{HOOKS}{hook.pk}/delete/")
    assert response.status_code == 302 and not Webhook.objects.exists()
    assert Delivery.objects.get().target == "https://hooks.example.com/x"


def test_the_wrong_method_is_a_405(client, member):
    login(client, member)
    assert client.get(EMAIL).status_code == 405
    assert client.get(HOOKS).status_code == 405
    assert client.post(PAGE).status_code == 405


def test_the_team_page_shows_admins_the_delivery_log_in_constant_queries(
        client, team_admin, member, team, other_team, quota, django_assert_num_queries):
    create_webhook(team_admin, team, "https://hooks.example.com/ours", ["run_failed"])
    theirs = make_user("theo")
    add_member(other_team, theirs, Role.ADMIN)
    create_webhook(theirs, other_team, "https://hooks.example.com/theirs", ["run_failed"])
    delivery.fan_out(events.record("run_failed", team, "ours-1", "Run ours failed", "x"))
    delivery.fan_out(events.record("run_failed", other_team, "theirs-1", "Run theirs failed", "x"))
    login(client, team_admin)
    with CaptureQueriesContext(connection) as queries:
        html = client.get("/teams/ml-research/").content.decode()
    assert "Run ours failed" in html and "hooks.example.com/ours" in html
    assert "theirs" not in html
    for n in range(2, 12):
        delivery.fan_out(events.record("run_failed", team, f"ours-{n}", f"Run {n} failed", "x"))
    with django_assert_num_queries(len(queries)):
        client.get("/teams/ml-research/")
    login(client, member)
    html = client.get("/teams/ml-research/").content.decode()
    assert "Run ours failed" not in html and 'href="/teams/ml-research/notifications/"' in html


def test_the_page_reads_the_webhooks_in_constant_queries(client, team_admin, team, django_assert_num_queries):
    create_webhook(team_admin, team, "https://hooks.example.com/0", ["run_failed"])
    login(client, team_admin)
    with CaptureQueriesContext(connection) as queries:
        assert client.get(PAGE).status_code == 200
    for n in range(1, 8):
        create_webhook(team_admin, team, f"https://hooks.example.com/{n}", [EventKind.BUDGET_ALERT])
    with django_assert_num_queries(len(queries)):
        html = client.get(PAGE).content.decode()
    assert html.count('class="row-form"') == 8 and "Budget alert" in html


def test_a_failing_webhook_says_so_and_when_it_is_tried_next(client, team_admin, team):
    """A webhook backing off after a failed attempt (notifications.delivery) is marked on the page until it answers."""
    failing, _ = create_webhook(team_admin, team, "https://hooks.example.com/down", ["run_failed"])
    create_webhook(team_admin, team, "https://hooks.example.com/up", ["run_failed"])
    Webhook.objects.filter(pk=failing.pk).update(backoff_until=timezone.now() + timedelta(minutes=2))
    login(client, team_admin)
    html = client.get(PAGE).content.decode()
    rows = dict(re.findall(r'<tr id="webhook-(\d+)">(.*?)</tr>', html, flags=re.S))
    assert "failing — next try" in rows[str(failing.pk)]
    assert [pk for pk, row in rows.items() if "failing" in row] == [str(failing.pk)]
