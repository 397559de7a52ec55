"""The event kinds come from notifications' own and what each workload kind declares (the kind registry)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from notifications import vocabulary
from notifications.constants import EventKind
from notifications.services import create_webhook, set_email_kinds
from workloads.registry import Announces, kinds

pytestmark = pytest.mark.django_db


def declared() -> list[str]:
    return [event.code for kind in kinds() for event in Announces.of(kind).events]


def test_each_event_kind_is_declared_once_and_fits_its_column():
    codes = declared()
    assert len(codes) == len(set(codes)) and len(codes) >= 4
    assert all(len(code) <= 32 for code in vocabulary.event_kinds())
    # The kinds' own are theirs alone: EventKind (notifications' own) names none of them (no second copy).
    assert {"run_succeeded", "run_failed", "endpoint_degraded", "workspace_paused"} <= set(codes)
    assert not set(EventKind.values) & set(codes)
    assert vocabulary.kind_event_codes() == codes
    labels = vocabulary.event_kinds()
    assert all(labels[member.value] == member.label for member in EventKind if member.value in codes)


def test_the_moves_and_the_owners_kinds_come_from_the_declarations():
    moves = vocabulary.moves()
    assert {event.code for event in moves.values()} == set(declared())
    # A paused workspace, a rolled-back canary: the owner's own work changed under them.
    assert vocabulary.owner_kinds() == {"workspace_paused", "endpoint_canary_rolled_back"}


def test_an_unknown_event_kind_is_a_field_error(member, team, team_admin):
    with pytest.raises(ValidationError) as caught:
        set_email_kinds(member, team, ["run_failed", "nonsense"])
    assert caught.value.message_dict == {"kinds": ["Unknown kinds of event: nonsense."]}
    with pytest.raises(ValidationError) as caught:
        create_webhook(team_admin, team, "https://hooks.example.com/x", ["nonsense"])
    assert caught.value.message_dict == {"kinds": ["Unknown kinds of event: nonsense."]}
