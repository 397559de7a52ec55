"""Changing a cohort's teams while another change of them commits (PostgreSQL): the members are
read again under their teams' locks, so the change and its audit event go by what they are then."""

from __future__ import annotations

import threading

import pytest
from django.db import transaction

from quotas.models import TeamSharing
from quotas.services import set_cohort
from teams.models import AuditEvent
from teams.services import lock_team
from tests.factories import make_team
from tests.threads import in_thread, paused_after, wait_until_lock_waiter

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

#: The first statement of a cohort change that reads its members (before any lock is taken).
READ_MEMBERS = 'SELECT "quotas_teamsharing"."team_id"'


def test_a_team_that_joined_meanwhile_is_locked_removed_and_audited_as_a_member(staff):
    alpha, beta = make_team("alpha"), make_team("beta")
    set_cohort(staff, "shared", teams=[])
    inside, go, errors = threading.Event(), threading.Event(), []

    def only_alpha():
        with paused_after(READ_MEMBERS, inside, go):
            set_cohort(staff, "shared", teams=[alpha])

    thread = in_thread(only_alpha, errors)
    assert inside.wait(10)
    set_cohort(staff, "shared", teams=[alpha, beta])  # commits between the other's read and its locks
    held, release = threading.Event(), threading.Event()

    def hold_beta():
        with transaction.atomic():
            lock_team(beta)  # the other change must wait for it before it removes beta
            held.set()
            release.wait(10)

    holder = in_thread(hold_beta, errors)
    assert held.wait(10)
    go.set()
    assert wait_until_lock_waiter(thread).lock == "transactionid"  # beta's row: the one lock held
    # It waits before it changes anything (not after commit, re-admitting beta's queue).
    assert TeamSharing.objects.get(team=beta).cohort.name == "shared"
    release.set()
    holder.join(10)
    thread.join(10)
    assert not errors and not thread.is_alive()
    assert list(TeamSharing.objects.filter(cohort__name="shared").values_list("team__slug", flat=True)) == ["alpha"]
    last = AuditEvent.objects.filter(target="cohort shared").order_by("pk").last()
    # Its "before" is the cohort as it was under the locks (beta in it), not as first read (empty).
    assert (last.details["old"]["teams"], last.details["new"]["teams"]) == (["alpha", "beta"], ["alpha"])


def test_of_two_creates_of_one_cohort_at_once_one_answers_201(staff, api_client_for):
    """The API chose 201 or 200 by an exists() read before the locked write: a create racing another, both
    reading "none yet", both answered 201 (the row was right; the answer was not)."""
    client = api_client_for(staff)
    inside, go, errors, answers = threading.Event(), threading.Event(), [], []

    def first():
        with paused_after('INSERT INTO "quotas_cohort"', inside, go):  # made, not committed
            answers.append(api_client_for(staff).put("/api/v1/cohorts/shared/", {}, format="json").status_code)

    thread = in_thread(first, errors)
    assert inside.wait(10)
    second = in_thread(lambda: answers.append(client.put("/api/v1/cohorts/shared/", {}, format="json").status_code),
                       errors)
    assert wait_until_lock_waiter(second).lock == "transactionid"  # its insert waits on the first's
    go.set()
    thread.join(10)
    second.join(10)
    assert not errors and sorted(answers) == [200, 201]
