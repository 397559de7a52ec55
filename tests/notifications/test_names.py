"""Names, not ids (issue 34.7): every notification names the team and the workload as people know them
("run train-llama (#12) of team ml-research"), says what happened once ("preempted", never
"preempted: preempted"), and leaves the bare ref (``run:12``) to the machine fields.

The preemptions are real ones (a cohort's reclaim, within-team priority, a spot interruption), so
the words tested are the words the preemption code writes.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from billing.models import PreemptionEvent
from notifications import delivery, events
from notifications.constants import EventKind
from notifications.models import Event
from notifications.services import create_webhook, set_email_kinds
from quotas import services as quota_services
from quotas.demo import seed_team_quotas
from teams.models import Role
from tests.factories import add_member, make_team, make_user
from tests.jobs.conftest import submit_run_as
from tests.jobs.test_spot_interruption import disrupt, running  # noqa: F401  (the running-run fixture)
from workloads import lifecycle
from workloads.cycle import preemption
from workloads.cycle import reconcile as rec
from workloads.models import ReasonCode
from workloads.registry import kind_for

pytestmark = pytest.mark.django_db

REF = re.compile(r"\b(?:run|ep|nb):\d+\b")


def doubled(text: str) -> list[str]:
    """Words said twice in a row, whatever the punctuation between them ("preempted: preempted")."""
    return [m.group(1) for m in re.finditer(r"\b(\w+)\b\W+\b\1\b", text, re.IGNORECASE)]


def human(text: str) -> str:
    """Fails unless ``text`` reads as people should read it: no doubled word, no bare ref."""
    assert not doubled(text), (doubled(text), text)
    assert not REF.search(text), text
    return text


@pytest.fixture
def subscribed(team, member, team_admin, receiver):
    """The team's webhook (a real receiver) and a member's e-mail, both for preemptions."""
    _hook, receiver.secret = create_webhook(team_admin, team, receiver.url, [EventKind.PREEMPTED])
    set_email_kinds(member, team, [EventKind.PREEMPTED])
    return receiver


def borrowed_and_wanted_back(team, member, staff, ran: timedelta | None = None):
    """ml-research runs 8 of its own and borrows vision's 4 idle units for train-llama (running for
    ``ran``, if given); vision wants them back. Returns train-llama, reclaim's victim."""
    vision = make_team("vision")
    seed_team_quotas(vision, {"a100-80gb": 4})
    quota_services.set_cohort(staff, "research", teams=[team, vision], min_runtime_minutes=0,
                              preemption_delay_seconds=0)
    submit_run_as(member, team, name="own", gpus_per_worker=8)
    victim = submit_run_as(member, team, name="train-llama", gpus_per_worker=4)
    if ran is not None:
        type(victim).objects.filter(pk=victim.pk).update(state="running", started_at=timezone.now() - ran)
    vera = make_user("vera")
    add_member(vision, vera, Role.MEMBER)
    submit_run_as(vera, vision, name="mine", gpus_per_worker=4)
    return victim


def pods_gone(workload, after: timedelta = timedelta(seconds=30)) -> None:
    """The cycle that sees a preempted workload's pods gone (``preemption.follow``): its lost work is final."""
    workload.refresh_from_db()
    kind = kind_for(workload.KIND_PREFIX)
    assert preemption.follow(kind, None, workload, None, workload.preempting_since + after)


def delivered(event: Event):
    """Send every delivery of ``event``: the webhook's body and the e-mail as they went out."""
    for pk in delivery.fan_out(event.key):
        assert delivery.attempt(pk).result == "sent"


def test_a_reclaimed_runs_notification_names_team_and_workload_once_everywhere(
        team, member, team_admin, quota, staff, subscribed, client, published):
    victim = borrowed_and_wanted_back(team, member, staff)
    assert preemption.reclaim(timezone.now()) == [victim.ref]
    reason = PreemptionEvent.objects.get().reason  # the preemption's real words
    assert reason.startswith("preempted: team vision reclaimed 4\u00d7 a100-80gb of its quota; ")

    pods_gone(victim)  # told once its lost work is final
    event = Event.objects.get(event_kind=EventKind.PREEMPTED)
    named = f"Run train-llama (#{victim.pk}) of team ml-research"
    assert human(event.title) == f"{named} preempted"
    assert human(event.text) == f"{named} {reason}"
    assert event.text.count("preempted") == 1

    delivered(event)
    # The e-mail: subject and body.
    [message] = mail.outbox
    assert human(message.subject) == f"[Slipway] {named} preempted"
    assert human(message.body) == f"{event.text}\n"
    # The webhook: its words name things; its machine fields stay as docs/api.md has them.
    [got] = subscribed.got
    assert got.verified
    assert human(got.body["title"]) == event.title and human(got.body["text"]) == event.text
    assert (got.body["ref"], got.body["team"], got.body["type"]) == (victim.ref, "ml-research", "preempted")
    assert (got.body["details"]["reason"], got.body["details"]["name"]) == (reason, "train-llama")
    # In the app: the Team page's delivery log.
    client.force_login(team_admin)
    page = client.get("/teams/ml-research/").content.decode()
    assert f"<td>{named} preempted</td>" in page


def test_a_within_team_preemption_names_the_work_it_made_room_for(team, member, quota, staff, published):
    quota_services.set_team_sharing(staff, team, within_team_preemption=True)
    low = submit_run_as(member, team, name="sweep", gpus_per_worker=8, priority="low")
    high = submit_run_as(member, team, name="urgent", gpus_per_worker=8, priority="high")
    assert preemption.reclaim(timezone.now() + timedelta(minutes=11)) == [low.ref]  # past the min runtime
    low.refresh_from_db()
    assert low.reason.startswith(f"being preempted: the team's high-priority run urgent (#{high.pk}) needs its 8\u00d7")
    pods_gone(low)
    event = Event.objects.get(event_kind=EventKind.PREEMPTED)
    assert human(event.text).startswith(
        f"Run sweep (#{low.pk}) of team ml-research preempted: the team's high-priority run urgent (#{high.pk}) "
        "needed its 8\u00d7 a100-80gb; ")


def test_a_spot_interruption_says_interrupted_once(running, fake_backend):  # noqa: F811
    run = running(spot=True)
    disrupt(fake_backend, run)
    rec.reconcile(fake_backend)
    event = Event.objects.get(event_kind=EventKind.PREEMPTED)
    named = f"Run {run.name} (#{run.pk}) of team ml-research"
    assert human(event.title) == f"{named} interrupted"
    assert human(event.text).startswith(f"{named} interrupted: spot capacity reclaimed (")
    assert event.text.count("interrupted") == 1 and event.ref == run.ref


def test_a_failed_run_and_a_long_wait_name_team_and_workload(submit, settings):
    failed = submit(name="bert", gpus_per_worker=2)
    assert lifecycle.fail(failed, "OOMKilled", ReasonCode.CLUSTER)
    event = Event.objects.get(event_kind="run_failed")
    assert human(event.text) == f"Run bert (#{failed.pk}) of team ml-research failed: OOMKilled"

    settings.SLIPWAY_NOTIFY_QUEUED_MINUTES = 30
    submit(name="big", gpus_per_worker=8)
    waiting = submit(name="waiting", gpus_per_worker=4)
    events.long_waits(timezone.now() + timedelta(minutes=31))
    wait = Event.objects.get(event_kind=EventKind.QUEUE_WAITING)
    assert human(wait.title) == f"Run waiting (#{waiting.pk}) of team ml-research has been queued for over 30 min"
    assert human(wait.text) == f"{wait.title}: {waiting.reason}"
    assert waiting.reason.startswith("waiting for quota: ")


def test_a_preemptions_message_says_the_work_lost_its_page_says(
        team, member, quota, staff, subscribed, published):
    """Issue 46: the e-mail and webhook said "under a minute of work lost" (written at the notice) while
    the page, the reason and the preemption log said "no work lost" (the notice's checkpoint, settled
    once the pods were gone). The message is recorded when the figure is final, in the same words."""
    victim = borrowed_and_wanted_back(team, member, staff, ran=timedelta(minutes=20))
    assert preemption.reclaim(timezone.now()) == [victim.ref]
    assert "; under a minute of work since its start lost" in PreemptionEvent.objects.get().reason
    assert not Event.objects.filter(event_kind=EventKind.PREEMPTED).exists()  # not final: its pods have a grace
    # On the notice it saves a last checkpoint, 5 s into the grace; the next cycle sees its pods gone.
    notice = PreemptionEvent.objects.get().at
    type(victim).objects.filter(pk=victim.pk).update(last_checkpoint_at=notice + timedelta(seconds=5))
    pods_gone(victim)
    victim.refresh_from_db()
    row = PreemptionEvent.objects.get()
    assert row.reason.endswith("; no work lost") and row.lost_gpu_hours == 0
    event = Event.objects.get(event_kind=EventKind.PREEMPTED)
    named = f"Run train-llama (#{victim.pk}) of team ml-research"
    assert human(event.text) == f"{named} {row.reason}" == f"{named} {victim.reason}"
    assert event.details["reason"] == row.reason
    delivered(event)
    [got] = subscribed.got
    assert got.body["text"].endswith("no work lost") and "under a minute" not in got.body["text"]
    [message] = mail.outbox
    assert "no work lost" in message.body and "under a minute" not in message.body
    preemption.settle_lost_work(kind_for("run"), victim, notice + timedelta(minutes=1))  # a replayed cycle
    assert Event.objects.filter(event_kind=EventKind.PREEMPTED).count() == 1
