"""Signals the teams app sends, for the apps above it to act on (docs/architecture.md "Upward: signals").

``membership_changed`` is sent by :meth:`teams.models.Membership.save` when a saved membership names another
user, team or role than its row held — a role changed on the Team page or by single sign-on's sync, a
membership edited or moved to another person or team in the admin console — *inside* the saving transaction,
after the save, with ``sender=Membership, before=<an unsaved Membership with the row's values before the
save>, membership=<the membership as saved>``. The person of ``before`` holds ``membership`` of
``before.team`` after the change when both name the same user and team, nothing of it otherwise. What a
receiver writes commits or rolls back with the change. A membership deleted is Django's ``post_delete``
(docs/architecture.md says why that one model signal).
"""

from django.dispatch import Signal

membership_changed = Signal()
