"""User actions on inference endpoints: one function per action, shared by the portal and the API.

* :func:`create_endpoint` validates, records and admits an endpoint (its guaranteed minimum) in
  one transaction; its objects are applied by a Celery task after commit.
* :func:`update_endpoint` changes image, env, secret env, sizes or autoscaling; a higher minimum
  is re-admitted and must fit now (burst the endpoint holds counts towards it); a lower one
  releases units at once; the objects are re-applied (a new image or secret env rolls).
* :func:`delete_endpoint` ends it: quota released at once, objects deleted, ``deleted`` once gone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.writes import Write, insert_of
from fleet.models import GpuFlavor, unknown_flavor
from inference import revisions, scaling
from inference.constants import (
    ACTIVE_STATES,
    AUDIT_CHANGED,
    AUDIT_CREATED,
    AUDIT_DELETED,
    HOLDING_STATES,
    EndpointState,
    Rollout,
    ScalingDecision,
)
from inference.models import EndpointRevision, InferenceEndpoint
from inference.validation import ROLLOUT_FIELDS, check_sizes, parse_endpoint_request
from quotas import admission, policy
from quotas.decide import Decision
from quotas.facts import cohort_id_of
from teams.models import Role, Team
from teams.permissions import (
    change_permission,
    check_may_end,
    get_for_user,
    get_membership,
    require_staff_permission,
    require_team,
    staff_may,
)
from teams.services import audit, audit_write, lock_team
from workloads import lifecycle, secrets
from workloads import services as workloads
from workloads.constants import MAX_ENV_VARS, Message
from workloads.estimates.preview import Preview, preview_request
from workloads.registry import kind_of


class EndpointConflict(Exception):
    """The endpoint's state does not allow the action (the API answers 409)."""


#: Names are unique among the team's unfinished endpoints (docs/glossary.md): deleting ones included.
NAME_TAKEN = "The team already has an endpoint named {name!r} that is not deleted or failed."


def get_endpoint_for_user(user, pk, role: str = Role.VIEWER, staff_reads: bool = False) -> InferenceEndpoint:
    """The endpoint ``pk`` if ``user`` may see it: 404 for outsiders, 403 when ``role`` is not met.

    ``staff_reads``: a read-only page or API read, which platform staff may make in any team.
    """
    return get_for_user(InferenceEndpoint.objects.select_related("team", "flavor", "created_by"), user, role,
                        staff_reads=staff_reads, pk=pk)


def _shape(fields: dict) -> policy.Shape:
    """What an endpoint asks of its flavor: serving, independent replicas of ``gpus_per_replica`` units."""
    return policy.Shape(training=False, units_per_pod=fields["gpus_per_replica"])


def _flavor_errors(flavor: GpuFlavor, fields: dict) -> dict[str, list[str]]:
    """The rules across the request and its flavor: sizes (:func:`check_sizes`) and what the flavor takes
    (:func:`quotas.policy.refusals`: one unit per replica on a shared GPU). Creation and the preview ask it."""
    errors = check_sizes(fields["min_replicas"], fields["max_replicas"], fields["autoscale"],
                         fields["gpus_per_replica"], bool(flavor.mig_profile))
    errors.update(policy.refusals(flavor, _shape(fields)).errors(units_field="gpus_per_replica"))
    return errors


def _reservation_errors(team: Team, flavor: GpuFlavor, fields: dict) -> dict[str, list[str]]:
    """Its ``for_reservation`` (:func:`workloads.services.reservation_errors`) for its guaranteed replicas' units,
    what admission puts into the window: creation and the preview alike."""
    units = max(fields["min_replicas"], 1) * fields["gpus_per_replica"]
    return workloads.reservation_errors(team, flavor, fields.get("for_reservation"), units, fields["spot"])


def _flavor(team: Team, fields: dict) -> GpuFlavor:
    flavor, errors = workloads.check_flavor_and_name(
        InferenceEndpoint, team, fields["flavor"], fields["name"],
        NAME_TAKEN.format(name=fields["name"]), fields.get("cluster_selector"))
    if flavor is not None:
        errors.update(_flavor_errors(flavor, fields))
    if "flavor" not in errors:
        errors.update(_reservation_errors(team, flavor, fields))
    if errors:
        raise ValidationError(errors)
    return flavor


def create_endpoint(user, team: Team | str, data: dict) -> InferenceEndpoint:
    """Create an endpoint for ``team`` (a Team or its slug); returns it deploying (admitted) or queued.

    Raises ``ValidationError`` (field errors; nothing written), ``PermissionDenied`` below the
    member role, ``Http404`` for outsiders.
    """
    # 1. Access and input (the access check loads the team when given its slug).
    team = require_team(user, team, Role.MEMBER).team
    fields = parse_endpoint_request(data, namespace=team.namespace)
    flavor = _flavor(team, fields)
    fields.pop("flavor")
    secret_env = fields.pop("secret_env")

    # 2. Record and admit its minimum in one transaction: a rejection rolls the row back.
    try:
        with transaction.atomic():
            endpoint = InferenceEndpoint(team=team, created_by=user, flavor=flavor, **fields)
            endpoint.replica_ceiling = endpoint.base_replicas
            endpoint.save()
            secrets.store(endpoint, tuple(sorted(secret_env.items())))
            decision = workloads.admit_new(endpoint, lambda decided, now: _created_rows(user, endpoint, decided, now))
            if decision.rejected:
                raise ValidationError(workloads.rejection_errors(decision, "gpus_per_replica", "min_replicas"))
    except IntegrityError:
        # Two creations with one name raced past the check above; the constraint decided.
        raise ValidationError({"name": [NAME_TAKEN.format(name=fields["name"])]}) from None
    return endpoint


def _created_rows(user, endpoint: InferenceEndpoint, decision: Decision, now: datetime) -> list[Write]:
    """What records a new endpoint's outcome: admitted, its first scaling event and replica
    sample (the chart starts here); and its audit row. Written with its admission in one round
    trip under the team's lock (:func:`workloads.services.admit_new`)."""
    rows = []
    if decision.admitted:
        rows = [insert_of(scaling.event(endpoint, ScalingDecision.ADMITTED, None, now, endpoint.replica_ceiling,
                                        decision.reason.words)),
                insert_of(scaling.replica_sample(endpoint, 0, 0, endpoint.replica_ceiling, now))]
    # Revision 1: the spec it was created with, stable, all the traffic (queued or not).
    rows.append(insert_of(revisions.first_revision(endpoint, user, now)))
    return [*rows, audit_write(AUDIT_CREATED, actor=user, team=endpoint.team,
                               target=f"endpoint {endpoint.pk} ({endpoint.name})", flavor=endpoint.flavor.name,
                               units=endpoint.base_replicas * endpoint.gpus_per_replica, outcome=decision.outcome)]


@dataclass(frozen=True)
class EndpointPreview:
    """What creating an endpoint would do now: the shared preview (of its minimum) and the burst above it."""

    preview: Preview
    cost_per_hour_at_max: Decimal
    burst: scaling.BurstOutlook
    min_replicas: int  #: for the cold-start words: at 0 the first request waits for a replica
    startup_timeout_seconds: int
    #: The team shares quota in a cohort: the form says its minimum never borrows (burst may).
    in_cohort: bool = False

    def as_dict(self) -> dict:
        return {**self.preview.as_dict(), "cost_per_hour_at_max": self.cost_per_hour_at_max,
                "burst_replicas_now": self.burst.replicas, "burst": self.burst.words}


def preview_endpoint(team: Team, data: dict) -> EndpointPreview:
    """The preview of creating the endpoint (docs/glossary.md "preview"): cost range, its minimum's cost to the month's end
    against the budget, whether it would start now, queue (position, estimate) or be refused —
    and how far burst would be granted now.

    Raises ``ValidationError`` for bad input (as :func:`create_endpoint` would).
    """
    fields = parse_endpoint_request(data, namespace=team.namespace)
    flavor = GpuFlavor.objects.filter(name=fields["flavor"]).first()
    if flavor is None or flavor.refusal():
        raise ValidationError({"flavor": [flavor.refusal() if flavor else unknown_flavor(fields["flavor"])]})
    errors = {**_flavor_errors(flavor, fields), **_reservation_errors(team, flavor, fields)}
    if errors:
        raise ValidationError(errors)
    draft = InferenceEndpoint(team=team, flavor=flavor,
                              **{k: v for k, v in fields.items() if k not in ("flavor", "secret_env")})
    burst = scaling.burst_outlook(team, flavor, draft.gpus_per_replica, draft.spot, draft.base_replicas, 0,
                                  draft.max_replicas)
    result = preview_request(team, kind_of(draft).resource_request(draft), flavor, None, draft.price_quote())
    # An endpoint has no end: in all, this month, its minimum costs what the budget counts.
    # What the flavor's advice says of this choice (quotas.policy): shown, never refused.
    result = dataclasses.replace(result, open_ended=True,
                                 warnings=policy.warnings(flavor, _shape(fields), fields["gpu_memory_gb"]))
    return EndpointPreview(result, draft.cost_per_hour_range[1], burst, draft.min_replicas,
                            draft.startup_timeout_seconds, in_cohort=cohort_id_of(team) is not None)


def burst_now(endpoint: InferenceEndpoint) -> scaling.BurstOutlook | None:
    """How far the burst of an endpoint holding quota would be granted now (None when it holds none)."""
    if endpoint.state not in HOLDING_STATES:
        return None
    return scaling.burst_outlook(endpoint.team, endpoint.flavor, endpoint.gpus_per_replica, endpoint.spot,
                                 endpoint.base_replicas, endpoint.ceiling, endpoint.max_replicas, ref=endpoint.ref)


def update_endpoint(user, endpoint: InferenceEndpoint, data: dict) -> InferenceEndpoint:
    """PATCH: change what docs/api.md lets a PATCH change. Nothing changes when any of it is refused.

    A change of image, command, args or env makes a new revision (:mod:`inference.revisions`), rolled out
    as ``rollout`` says: ``replace`` (the Deployment rolls) or ``canary`` at a ``weight`` (the endpoint keeps
    its spec; the candidate runs beside it).
    """
    return _update(user, endpoint, data)[0]


NOTHING_CHANGES = "Nothing changes: the image, command, args and env are the endpoint's already."


def _update(user, endpoint: InferenceEndpoint, data: dict,
            new_revision: bool = False) -> tuple[InferenceEndpoint, EndpointRevision | None]:
    """:func:`update_endpoint`, and the revision this change made (None: it made none), as it was made in
    the change's transaction: a rollout answers with its own revision, not whichever is newest once it
    committed (another rollout's, made a moment after). ``new_revision``: a rollout, refused with nothing
    written (no audit row, no apply) when the serving fields are the endpoint's already."""
    require_team(user, endpoint.team, Role.MEMBER)
    changes = parse_endpoint_request(data, partial=True, namespace=endpoint.team.namespace)
    rollout = {name: changes.pop(name) for name in ROLLOUT_FIELDS if name in changes}
    strategy = rollout.get("rollout", Rollout.REPLACE)
    with transaction.atomic():
        lock_team(endpoint.team)  # sizes change only under the team's admission lock
        current = InferenceEndpoint.objects.select_for_update().get(pk=endpoint.pk)
        if current.state not in ACTIVE_STATES:
            raise EndpointConflict(f"The endpoint is {current.state}; it can no longer be changed.")
        serving = revisions.serving_changes(current, changes)
        if new_revision and not serving:
            raise ValidationError({"non_field_errors": [NOTHING_CHANGES]})
        if strategy == Rollout.CANARY:
            if not serving:
                raise ValidationError({"rollout": ["A canary needs a new revision: a change of image, command, "
                                                   "args or env."]})
            if current.state not in HOLDING_STATES:
                raise EndpointConflict(f"The endpoint is {current.state}; a canary runs beside a running endpoint "
                                       f"(use rollout: replace).")
        merged = {name: changes.get(name, getattr(current, name))
                  for name in ("min_replicas", "max_replicas", "autoscale")}
        errors = check_sizes(merged["min_replicas"], merged["max_replicas"], merged["autoscale"],
                             current.gpus_per_replica, bool(current.flavor.mig_profile))
        errors.update(_env_clashes(changes, current))
        if errors:
            raise ValidationError(errors)
        resized = any(changes[name] != getattr(current, name)
                      for name in ("min_replicas", "max_replicas") if name in changes)
        if resized and current.state == EndpointState.QUEUED:
            raise EndpointConflict("The endpoint waits for quota; delete it and create it with the new sizes.")
        old_base = current.base_replicas
        secret_env = changes.pop("secret_env", None)
        revision = None
        if serving:
            try:
                revision = revisions.start(user, current, serving, strategy, rollout.get("weight"),
                                           rollout.get("auto_promote_windows") or 0, timezone.now())
            except revisions.RolloutConflict as exc:
                raise EndpointConflict(str(exc)) from None
            if strategy == Rollout.CANARY:
                # The endpoint keeps serving its stable spec; the candidate's lives in its revision.
                for name in revisions.SERVING_FIELDS:
                    changes.pop(name, None)
        for name, value in changes.items():
            setattr(current, name, value)
        if resized:
            _resize(current, old_base)
        current.save(update_fields=[*changes, "replica_ceiling", "demand_below_ceiling_since"])
        details = {}
        if revision is not None:
            details.update(revision=revision.number, rollout=strategy)
        if secret_env is not None:
            secrets.replace(current, tuple(sorted(secret_env.items())))
            details["secret_env"] = sorted(secret_env)  # the names: a value never reaches the audit log
        audit(AUDIT_CHANGED, actor=user, team=current.team,
              target=f"endpoint {current.pk} ({current.name})",
              fields=sorted([*changes, *(serving if strategy == Rollout.CANARY else []),
                             *(["secret_env"] if secret_env is not None else [])]), **details)
        if current.state != EndpointState.QUEUED:
            # A new image or secret env rolls (the pod template changes); sizes reach the ScaledObject.
            workloads.enqueue_apply(current.identity)
    return current, revision


def _env_clashes(changes: dict, current: InferenceEndpoint) -> dict[str, list[str]]:
    """A name in both env and secret env once the PATCH applies (which value would win?), or too many.

    A clash within the request itself was refused by the validation already; this compares
    what the PATCH changes with what it keeps.
    """
    env = changes.get("env", current.env)
    secret = set(changes["secret_env"]) if "secret_env" in changes else set(secrets.names(current))
    field = "env" if "env" in changes else "secret_env"
    if field == "env":
        errors = [f"{name} is a secret env variable of this endpoint: set it in one of them."
                  for name in sorted(set(env) & secret)]
    else:
        errors = [f"{name} is set in env too: set it in one of them." for name in sorted(set(env) & secret)]
    if len(env) + len(secret) > MAX_ENV_VARS:
        errors.append(f"At most {MAX_ENV_VARS} variables in env and secret_env together.")
    return {field: errors} if errors else {}


def _resize(endpoint: InferenceEndpoint, old_base: int) -> None:
    """Re-admit a changed minimum or maximum (the caller holds the team's lock and saves the row).

    The ceiling keeps the burst it was granted, moved by the change: a lower minimum gives its
    replicas' units back at once, a higher one must fit now (burst the endpoint holds counts
    towards it), and a lower maximum caps the ceiling at once — replicas above it stop when the
    ScaledObject is re-applied, and their units go back. Burst below the new maximum stays.
    """
    current = endpoint.replica_ceiling or old_base
    lowered_minimum = max(old_base - endpoint.base_replicas, 0)
    ceiling = min(max(current - lowered_minimum, endpoint.base_replicas), endpoint.max_replicas)
    decision = admission.resize(endpoint.team, endpoint.ref, revisions.held_units(endpoint, ceiling),
                                committed=kind_of(endpoint).committed(endpoint))  # a new minimum commits anew
    if not decision.admitted:
        raise ValidationError({"min_replicas": [decision.reason.words]})
    now = timezone.now()
    endpoint.replica_ceiling, endpoint.demand_below_ceiling_since = ceiling, None
    scaling.record(endpoint, ScalingDecision.MINIMUM_CHANGED, None, now, ceiling,
                   f"min {endpoint.min_replicas}, max {endpoint.max_replicas}: ceiling {current} \u2192 {ceiling}; "
                   f"{decision.reason.words}")
    if ceiling != current:
        scaling.sample(endpoint, endpoint.replicas, endpoint.desired_replicas, ceiling, now)
    if ceiling < current:
        lifecycle.cap_billing(endpoint, revisions.held_units(endpoint), now)  # replicas above it are billed no more


def scale_to_minimum(user, endpoint: InferenceEndpoint) -> bool:
    """Give back the endpoint's burst at once (staff, from the admin console); False when it holds none."""
    if not staff_may(user, change_permission(endpoint)):
        if user.is_staff and get_membership(user, endpoint.team) is None:
            require_staff_permission(user, change_permission(endpoint), "scale another team's endpoint")
        require_team(user, endpoint.team, Role.ADMIN)
    given_back = scaling.set_ceiling(endpoint, endpoint.base_replicas, ScalingDecision.BURST_RECLAIMED, None, timezone.now(),
                                     f"scaled to its minimum by {user.username}")
    if given_back:
        audit(AUDIT_CHANGED, actor=user, team=endpoint.team,
              target=f"endpoint {endpoint.pk} ({endpoint.name})", fields=["replica_ceiling"])
    return given_back


def delete_endpoint(user, endpoint: InferenceEndpoint) -> InferenceEndpoint:
    """Delete ``endpoint``: its quota is released at once, its objects deleted; ``deleted`` once gone.

    Who may is :func:`teams.permissions.may_end` (team admins any endpoint, members their own
    and — as the team's setting says — their teammates', staff any team's).
    """
    check_may_end(user, endpoint)
    with transaction.atomic():
        if not workloads.end_by_user(endpoint, Message.DELETED_BY.format(user=user.username)):
            endpoint.refresh_from_db()
            raise EndpointConflict(f"The endpoint is already {endpoint.state}.")
        now = timezone.now()
        revisions.end_with_endpoint(endpoint, {"by": user.username, "at": now.isoformat(),
                                               "ended": EndpointState.DELETED}, now)
        audit(AUDIT_DELETED, actor=user, team=endpoint.team,
              target=f"endpoint {endpoint.pk} ({endpoint.name})")
    endpoint.refresh_from_db()
    return endpoint




def promote_endpoint(user, endpoint: InferenceEndpoint) -> InferenceEndpoint:
    """Promote the endpoint's candidate by hand (:func:`inference.revisions.promote`); 409 without one."""
    require_team(user, endpoint.team, Role.MEMBER)
    with transaction.atomic():
        try:
            rev = revisions.promote(user, endpoint, {"by": user.username, "at": timezone.now().isoformat()})
        except revisions.RolloutConflict as exc:
            raise EndpointConflict(str(exc)) from None
        audit(AUDIT_CHANGED, actor=user, team=endpoint.team, target=f"endpoint {endpoint.pk} ({endpoint.name})",
              fields=list(revisions.SERVING_FIELDS), revision=rev.number, rollout="promote")
    endpoint.refresh_from_db()
    return endpoint


def rollback_endpoint(user, endpoint: InferenceEndpoint) -> InferenceEndpoint:
    """Roll the endpoint's candidate back by hand: as the rule does, with the verdict "by <user>"; 409 without one."""
    require_team(user, endpoint.team, Role.MEMBER)
    with transaction.atomic():
        now = timezone.now()
        rev = revisions.roll_back(endpoint, {"by": user.username, "at": now.isoformat()},
                                  f"rolled back by {user.username}", now)
        if rev is None:
            raise EndpointConflict("There is no canary revision to roll back.")
        audit(AUDIT_CHANGED, actor=user, team=endpoint.team, target=f"endpoint {endpoint.pk} ({endpoint.name})",
              fields=["revision"], revision=rev.number, rollout="rollback")
    endpoint.refresh_from_db()
    return endpoint


#: What ``POST /endpoints/{id}/rollout/`` takes: the serving fields, how to roll them out (``strategy``).
ROLLOUT_REQUEST_FIELDS = ("image", "command", "args", "env", "strategy", "weight", "auto_promote_windows")


def rollout_endpoint(user, endpoint: InferenceEndpoint, data) -> EndpointRevision:
    """A new revision of the endpoint's serving fields, rolled out by ``strategy`` (replace or canary):
    the API's and the CLI's ``rollout``. Returns the new revision; 400 when nothing in it changes the spec.

    The same validation and service as a PATCH (:func:`update_endpoint`), with ``strategy`` for ``rollout``:
    a field error on ``rollout`` is answered on ``strategy``.
    """
    require_team(user, endpoint.team, Role.MEMBER)  # who may, before what was asked
    if not isinstance(data, dict):
        raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
    unknown = sorted(set(data) - set(ROLLOUT_REQUEST_FIELDS))
    if unknown:
        raise ValidationError({"non_field_errors": [f"Unknown field(s): {', '.join(map(str, unknown))}; a rollout "
                                                    f"takes {', '.join(ROLLOUT_REQUEST_FIELDS)}."]})
    if not any(name in data for name in revisions.SERVING_FIELDS):
        raise ValidationError({"non_field_errors": ["A rollout needs a new image, command, args or env."]})
    patch = {name: data[name] for name in ROLLOUT_REQUEST_FIELDS if name in data and name != "strategy"}
    patch["rollout"] = data.get("strategy") or Rollout.REPLACE
    try:
        _endpoint, revision = _update(user, endpoint, patch, new_revision=True)
    except ValidationError as exc:
        errors = exc.message_dict
        if "rollout" in errors:
            errors["strategy"] = errors.pop("rollout")
        raise ValidationError(errors) from None
    return revision
