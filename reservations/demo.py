"""The demo's reservation (``manage.py seed_demo``): NLP Platform's release evaluation, 4 H100s on east from
about twelve minutes after seeding, for two hours — booked through the service like any booking, as erin, a member.

Why twelve minutes, with ``make run``'s lead of three (``scripts/run.sh``): the demo's borrowed run
(``llama-ablation``, which the cohort's reclaim stops at about 2½ minutes) comes back about 7½ minutes in, lent
the window's idle units on east (every other H100 is taken), and gets the window's preemption notice when its
lead begins at about 9 minutes: a borrower preempted on the way, with a margin of about a minute and a half
either side for a slow machine. From the window's start its idle units are lent again (README "Watch a
reservation")."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from django.contrib.auth import get_user_model

import fleet.services as fleet
from fleet.models import GpuFlavor
from reservations import services
from reservations.windows import local
from teams.models import Team

TEAM, USER, FLAVOR, CLUSTER, UNITS, NAME = "nlp", "erin", "h100-80gb", "east", 4, "release-eval"
#: How long after seeding it starts (rounded up to the next minute), and how long it lasts.
AHEAD, LENGTH = timedelta(minutes=12), timedelta(hours=2)


def seed_demo_reservation(now: datetime) -> str:
    """Book the demo's reservation; the line ``seed_demo`` prints (why not, when it cannot)."""
    team = Team.objects.filter(slug=TEAM).first()
    user = get_user_model().objects.filter(username=USER).first()
    flavor = GpuFlavor.objects.filter(name=FLAVOR).first()
    cluster = fleet.get(CLUSTER)
    if None in (team, user, flavor, cluster):
        return f"No demo reservation: the demo's {TEAM}, {USER}, {FLAVOR} or cluster {CLUSTER} is missing."
    # What the reconcile cycle records every round: the booking's room is counted from the nodes last recorded.
    fleet.record_nodes(cluster, fleet.backend(cluster).capacity(), now)
    zone = ZoneInfo("UTC")
    start = local(now + AHEAD + timedelta(minutes=1), zone).replace(second=0, microsecond=0)
    booking = services.Booking(team=team, flavor=flavor, cluster=cluster, units=UNITS, start=start,
                               end=start + LENGTH, zone=zone, recurrence=None, name=NAME,
                               purpose="The release candidate's evaluation: the GPUs must be ours at the start.")
    try:
        reservation = services.book(user, booking)
    except services.BookingRefused as refused:
        return f"No demo reservation: {'; '.join(m for ms in refused.errors.values() for m in ms)}"
    return (f"{team.name} reserved {UNITS}\u00d7 {FLAVOR} on {CLUSTER} as {NAME} from {start:%H:%M} UTC for "
            f"{LENGTH.seconds // 3600} h (reservation {reservation.pk}).")
