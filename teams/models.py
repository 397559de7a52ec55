"""Teams, membership, API tokens, the audit log, and what the demo seeding created.

A :class:`Team` is the unit of tenancy: every run, endpoint, quota and hold belongs
to exactly one team, and each team owns one Kubernetes namespace. People belong to teams
through :class:`Membership` with a role.
"""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.core.validators import RegexValidator
from django.db import models, transaction
from django.utils import timezone

from core.zones import validate_time_zone
from teams.events import membership_changed

DNS1123_LABEL = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    "Use lowercase letters, digits and '-', starting and ending with a letter or digit.",
)


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    MEMBER = "member", "Member"
    ADMIN = "admin", "Admin"


#: Roles ordered by power: a role may do everything the roles before it may.
ROLE_RANK = {Role.VIEWER: 0, Role.MEMBER: 1, Role.ADMIN: 2}


class TeamQuerySet(models.QuerySet):
    def for_user(self, user) -> TeamQuerySet:
        """Teams the user belongs to (none for anonymous users)."""
        if not user.is_authenticated:
            return self.none()
        return self.filter(memberships__user=user)


class Team(models.Model):
    slug = models.SlugField(max_length=40, unique=True, validators=[DNS1123_LABEL])
    name = models.CharField(max_length=100)
    namespace = models.CharField(
        max_length=63,
        unique=True,
        validators=[DNS1123_LABEL],
        help_text="Kubernetes namespace of the team's workloads (default: prefix + slug).",
    )
    members_may_cancel_teammates_work = models.BooleanField(
        default=True,
        help_text="Whether members may cancel runs and delete endpoints their teammates started "
        "(admins always may; set by the team's admins on the Team page).",
    )
    time_zone = models.CharField(
        max_length=64, blank=True, validators=[validate_time_zone],
        help_text="IANA name (Europe/Berlin) the team's reservations are told in; empty: the portal's time zone.")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        if not self.namespace:
            self.namespace = f"{settings.SLIPWAY_NAMESPACE_PREFIX}{self.slug}"[:63]
        super().save(*args, **kwargs)


class Membership(models.Model):
    class Source(models.TextChoices):
        #: Added by a person (a team admin, staff, the demo seed): sign-in never touches it.
        MANUAL = "manual", "Added by hand"
        #: Follows the identity provider's groups: made to match them at every sign-in (teams.sso).
        OIDC = "oidc", "Single sign-on groups"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    source = models.CharField(
        max_length=10, choices=Source.choices, default=Source.MANUAL,
        help_text="Single sign-on groups: made to match the person's groups at every sign-in. Added by hand: never "
        "touched by sign-in (set this to keep a membership the groups would change or remove).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="uniq_membership")]
        ordering = ["team__slug", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"

    def save(self, *args, **kwargs) -> None:
        """Save it; when it now names another user, team or role than its row held, tell the apps above
        (:data:`teams.events.membership_changed`, in this transaction).

        Here rather than in each service, because a membership changes by several doors — the Team page
        (:func:`teams.services.change_role`), single sign-on's sync, the admin console's membership page and
        its team page's inline rows — and a way in lost by any of them must be closed (a demoted admin's into
        the workspaces shared with admins: docs/workspaces.md). So memberships change through ``save()``:
        ``QuerySet.update()`` goes around this, as around every save hook. The row is read locked, so the
        values ``before`` are the ones this save replaces, whatever a concurrent change did.
        """
        with transaction.atomic():
            before = None
            if not self._state.adding and self.pk is not None:
                # Unordered: the default ordering's joins would lock the team's and the user's rows too.
                before = type(self).objects.select_for_update().filter(pk=self.pk).order_by().first()
            super().save(*args, **kwargs)
            if before is not None and (before.user_id, before.team_id, before.role) != (
                    self.user_id, self.team_id, self.role):
                membership_changed.send(sender=type(self), before=before, membership=self)

    def allows(self, role: str) -> bool:
        """Whether this membership's role is at least ``role``."""
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(role)]

    @property
    def manages_team(self) -> bool:
        """Whether it is an admin who can act: the team keeps one at least (:mod:`teams.services`).

        A deactivated account cannot sign in, so its admin role manages nothing.
        """
        return self.role == Role.ADMIN and self.user.is_active


class GroupMapping(models.Model):
    """A value of the identity provider's groups claim that gives its holders a role in a team.

    Edited by staff in the admin console; seeded once per entry from ``SLIPWAY_OIDC_GROUP_MAP``
    (:func:`teams.sso.seed_group_map`). Several mappings may name one team: the highest role wins.
    """

    claim_value = models.CharField(max_length=200, help_text="A value of the groups claim, exactly as the provider "
                                   "sends it (e.g. gpu-ml or /ml-research).")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="group_mappings")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["claim_value", "team"], name="uniq_group_mapping")]
        ordering = ["claim_value", "team__slug"]

    def __str__(self) -> str:
        return f"{self.claim_value} → {self.team.slug} ({self.role})"


class GroupMapSeed(models.Model):
    """An ``SLIPWAY_OIDC_GROUP_MAP`` entry already seeded, by ``<group>=<team-slug>``: seeded once, so a
    mapping staff changed or deleted since stays so."""

    key = models.CharField(max_length=300, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.key


def hash_token(raw: str) -> str:
    """Tokens are stored as SHA-256 digests: they carry ≥128 random bits, so no salt or KDF is needed."""
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet):
    def usable(self) -> ApiTokenQuerySet:
        now = timezone.now()
        return self.filter(revoked_at__isnull=True).filter(models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now))


class ApiToken(models.Model):
    """A personal API token. Only its hash is stored; the raw value is shown once at creation."""

    PREFIX = "slp_"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    # First characters of the raw token, so people can tell their tokens apart.
    key_prefix = models.CharField(max_length=12, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Origin(models.TextChoices):
        PORTAL = "portal", "API tokens page"
        DEVICE = "device", "slipway login (browser)"
        COMMAND = "command", "manage.py create_api_token"

    #: Where it was made: the tokens page lists it, so a token nobody remembers asking for stands out.
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.PORTAL, db_default=Origin.PORTAL)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        verbose_name = "API token"
        verbose_name_plural = "API tokens"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.key_prefix}…)"

    @classmethod
    def generate(cls) -> str:
        # 32 bytes = 256 bits from the OS CSPRNG.
        return cls.PREFIX + secrets.token_urlsafe(32)

    @property
    def is_usable(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())


class DeviceLogin(models.Model):
    """A ``slipway login`` waiting for its person (OAuth 2.0 Device Authorization Grant, RFC 8628).

    The command line asks for one and shows its **user code** (``ABCD-EFGH``); the person opens
    the portal's device page signed in, checks the code and approves; the command line, polling
    with the **device code**, then receives a personal API token (:mod:`teams.device`). Both
    codes are stored as digests only. A login lives ``SLIPWAY_DEVICE_LOGIN_TTL_SECONDS`` and is
    redeemed once (``state`` moves pending → approved|denied → redeemed, each move a conditional
    update).
    """

    class State(models.TextChoices):
        PENDING = "pending", "Waiting for approval"
        APPROVED = "approved", "Approved, token not yet collected"
        DENIED = "denied", "Denied"
        REDEEMED = "redeemed", "Token collected"

    device_code_hash = models.CharField(max_length=64, unique=True, editable=False)
    #: HMAC of the normalised user code (keyed with SECRET_KEY: the code itself has only ~34 bits).
    user_code_hash = models.CharField(max_length=64, unique=True, editable=False)
    client_name = models.CharField(max_length=100, blank=True, help_text="The host the command line runs on, as it said.")
    requested_ip = models.GenericIPAddressField(null=True, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    expires_at = models.DateTimeField(db_index=True)
    #: Seconds the command line waits between polls; each too-early poll adds 5 (RFC 8628 ``slow_down``).
    interval = models.PositiveIntegerField()
    last_polled_at = models.DateTimeField(null=True, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="+", help_text="Who approved or denied it.")
    token_name = models.CharField(max_length=100, blank=True)
    token_expires_days = models.PositiveIntegerField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"device login {self.pk} from {self.client_name or '?'} ({self.state})"


#: Audit actions declared by the apps above teams (a workload kind's ``audit_actions``, registered
#: with it by :func:`workloads.registry.register`): ``{action: label}``. See :func:`audit_actions`.
_DECLARED_ACTIONS: dict[str, str] = {}


def declare_audit_actions(actions: dict[str, str]) -> None:
    """Add ``actions`` (``{action: label}``) to the audit vocabulary; an action is declared once.

    Raises ``ValueError`` when one is already :class:`AuditEvent.Action`'s or another's with another label.
    """
    for action, label in actions.items():
        known = audit_actions().get(action)
        if known is not None and known != label:
            raise ValueError(f"audit action {action!r} is declared twice ({known!r}, {label!r})")
        if len(action) > AuditEvent._meta.get_field("action").max_length:
            raise ValueError(f"audit action {action!r} is longer than its column")
    _DECLARED_ACTIONS.update(actions)


def audit_actions() -> dict[str, str]:
    """``{action: label}``: the core actions (:class:`AuditEvent.Action`) and those the kinds declare.

    The ``action`` column has no fixed ``choices``: it is validated against this when written
    (``teams.services.audit``), so a new kind's actions need no migration here.
    """
    return {**dict(AuditEvent.Action.choices), **_DECLARED_ACTIONS}


class AuditEvent(models.Model):
    """A security-relevant action: who did what to which object, and when. Append-only."""

    class Action(models.TextChoices):
        LOGIN_FAILED = "login_failed", "Login failed"
        LOGIN = "login", "Logged in"
        TOKEN_CREATED = "token_created", "API token created"
        TOKEN_REVOKED = "token_revoked", "API token revoked"
        MEMBERSHIP_CHANGED = "membership_changed", "Membership changed"
        GROUP_MAPPING_CHANGED = "group_mapping_changed", "Single sign-on group mapping changed"
        TEAM_SETTINGS_CHANGED = "team_settings_changed", "Team settings changed"
        QUOTA_CHANGED = "quota_changed", "Quota changed"
        BUDGET_CHANGED = "budget_changed", "Budget changed"
        PRICE_CHANGED = "price_changed", "Price changed"
        BUDGET_ALERT = "budget_alert", "Budget alert threshold crossed"
        WORKLOAD_PREEMPTED = "workload_preempted", "Workload preempted (quota reclaimed)"
        CLUSTER_CHANGED = "cluster_changed", "Cluster drained, made ready or edited"
        DEVICE_LOGIN = "device_login", "Command-line sign-in approved or denied"

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150, blank=True, help_text="Username at the time (kept if the user is deleted).")
    action = models.CharField(max_length=40, db_index=True, help_text="Its action (teams.models.audit_actions).")
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    target = models.CharField(max_length=200, blank=True)
    details = models.JSONField(default=dict, blank=True)
    ip_address = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_name or '-'} {self.action} {self.target}"

    def get_action_display(self) -> str:
        """The action's label (:func:`audit_actions`), or its code when no app declares it any more."""
        return audit_actions().get(self.action, self.action)


class IdempotencyRecord(models.Model):
    """The first response to a POST carrying an ``Idempotency-Key`` (docs/api.md), kept for 24 h.

    Unique per (user, key): a retried POST returns this response instead of creating a
    second object.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    path = models.CharField(max_length=300)
    #: HMAC-SHA-256 (keyed with SECRET_KEY) of the request's path and parsed body: a replay must be the same request.
    #: Empty on records kept before it existed (those compare the path only).
    request_hash = models.CharField(max_length=64, blank=True, default="")
    status_code = models.PositiveSmallIntegerField()
    body = models.JSONField(encoder=DjangoJSONEncoder)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="uniq_idempotency_key")]

    def __str__(self) -> str:
        return f"{self.key} ({self.path}, {self.status_code})"


class DemoSeed(models.Model):
    """A demo object ``manage.py seed_demo`` has created, by a key such as ``member:ml-research/alice``.

    The command creates each demo object once: a rerun (``make run`` seeds on every start)
    skips every key recorded here, so what an admin changed or removed since stays so.
    """

    key = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.key
