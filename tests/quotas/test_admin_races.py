"""The admin console's quota edits racing admission on PostgreSQL (found in review).

Admission used to serialise a team on its quota rows, locked in primary-key order, while the
team page saves its quota inline row by row in the order it lists them (by flavor name): with
two quotas changed in one save while a run was admitted, each transaction held a row the other
waited for. Both now take the team's admission lock first (``teams.services.lock_team``).
"""

from __future__ import annotations

import threading

import pytest
from django.db.models.signals import post_save
from django.test import Client

from billing.models import QuotaHold
from quotas.admission import admit
from quotas.decide import ResourceRequest
from quotas.models import TeamQuota
from quotas.tasks import sync_team_quota
from tests.quotas.test_admin import team_form
from tests.threads import in_thread, wait_until_lock_waiter

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_editing_two_quotas_on_the_team_page_while_a_run_is_admitted_does_not_deadlock(
        quota_team, staff, monkeypatch):
    monkeypatch.setattr(sync_team_quota, "delay", lambda team_id: None)
    # The page lists the quotas by flavor name; their primary keys are in another order
    # (a100-80gb, l4, a100-1g.10gb were created in that order).
    listed = list(quota_team.quotas.all())
    assert [q.flavor.name for q in listed] == ["a100-1g.10gb", "a100-80gb", "l4"]
    assert [q.pk for q in listed] != sorted(q.pk for q in listed)
    for quota in listed[:2]:
        quota.limit += 1  # staff raise both A100 quotas in one save of the team page
    client = Client()
    client.force_login(staff)

    # Hold the page's transaction right after it saved its first quota row (a100-1g.10gb).
    inside, go = threading.Event(), threading.Event()

    def paused(sender, instance, **kwargs):
        if not inside.is_set():  # only the page saves quota rows here
            inside.set()
            go.wait(10)

    post_save.connect(paused, sender=TeamQuota, dispatch_uid="review.paused")
    errors: list[Exception] = []
    responses: list = []
    try:
        saving = in_thread(lambda: responses.append(
            client.post(f"/admin/portal/team/{quota_team.pk}/change/", team_form(quota_team, listed))), errors)
        assert inside.wait(10)
        # A submission is admitted meanwhile (it used to lock the quota rows in pk order and wait
        # for the a100-1g.10gb row the page held; now it waits for the page's team lock).
        admitting = in_thread(lambda: admit(quota_team, ResourceRequest("a100-80gb", 2, 2), "run:1"), errors)
        assert '"portal_team"' in wait_until_lock_waiter(admitting).query
        go.set()  # the page goes on to the a100-80gb row, which the admission holds
        saving.join(30)
        admitting.join(30)
    finally:
        go.set()  # a failed assertion must not leave the held side waiting
        post_save.disconnect(dispatch_uid="review.paused")

    assert errors == []  # it was: a DeadlockDetected (OperationalError) in one of the two
    assert responses and responses[0].status_code == 302
    assert dict(quota_team.quotas.values_list("flavor__name", "limit")) == {
        "a100-1g.10gb": 8, "a100-80gb": 9, "l4": 2}
    assert QuotaHold.objects.held().filter(ref="run:1").exists()
