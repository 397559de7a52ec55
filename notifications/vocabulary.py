"""The event kinds: notifications' own and those each workload kind declares (``Announces.events``).

:class:`notifications.constants.EventKind` holds the event kinds that are about no one kind (a
preemption, a budget alert, a long wait) and names the kinds' older ones for the code that
subscribes to them; the full vocabulary — what the forms offer, what a subscription may list and
what the event columns hold (validated here, not by ``choices``, so a new kind's events need no
migration) — is read from the kind registry, so adding a kind touches nothing in notifications.
"""

from __future__ import annotations

from notifications.constants import STAFF_KINDS, EventKind
from workloads.registry import Announces, KindEvent, kinds


def event_kinds() -> dict[str, str]:
    """``{event kind: label}``: notifications' own, then each registered kind's, in registration order."""
    found = dict(EventKind.choices)
    for kind in kinds():
        found.update({event.code: event.label for event in Announces.of(kind).events})
    return found


def kind_event_codes() -> list[str]:
    """The event kinds the workload kinds declare (``Announces.events``), in registration order."""
    return [event.code for kind in kinds() for event in Announces.of(kind).events]


def team_kinds() -> dict[str, str]:
    """The event kinds a team's members subscribe to and its webhooks list: all but staff's own
    (:data:`~notifications.constants.STAFF_KINDS`, told to platform staff alone)."""
    return {code: label for code, label in event_kinds().items() if code not in STAFF_KINDS}


def choices() -> list[tuple[str, str]]:
    """The event kinds a team subscribes to, as form choices."""
    return list(team_kinds().items())


def unknown(codes) -> list[str]:
    """Those of ``codes`` that are no event kind a team may subscribe to, sorted."""
    return sorted(set(codes) - set(team_kinds()))


def moves() -> dict[tuple[type, str], KindEvent]:
    """The workload moves that are events: (the kind's model, its new state) → the kind's event."""
    return {(kind.model, event.state): event for kind in kinds() for event in Announces.of(kind).events}


def owner_kinds() -> set[str]:
    """Event kinds told to the workload's owner too, subscribed or not (their own work stopped under them)."""
    return {event.code for kind in kinds() for event in Announces.of(kind).events if event.to_owner}
