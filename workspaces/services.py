"""User actions on workspaces: one function per action, shared by the portal, the API and the CLI.

* :func:`create_workspace` validates, records and admits a workspace in one transaction (its token
  made and sealed with it); its objects are applied by the shared apply task after commit.
* :func:`pause` deletes its pods (not its home volume), closes its billing and gives its quota back,
  for its owner (:func:`pause_by_user`), an idle window run out (:mod:`workspaces.idle`), a spent
  budget or a restart that failed; :func:`resume` admits it again like new work: it may wait in
  the team's queue, with the usual reason and start estimate.
* :func:`delete_workspace` ends it with its home volume, after a confirmation that names its size.
* :func:`open_url` and :func:`authorize` are the two halves of the way into its Jupyter server, which is
  served on a host of its own (:mod:`workspaces.access`): the portal's "Open" hands an allowed user a
  one-use ticket to that host, whose gate (the ingress controller's ``auth-url``, the sandbox's proxy)
  asks :func:`authorize` about every request, by the workspace's cookie, never the portal's session.
* :func:`rotate_token` gives it a new Jupyter token when someone loses the right to open it (unshared,
  a member left, moved away or no longer an admin: :func:`rotate_lost_ways_in`) and on every resume.
"""

from __future__ import annotations

import dataclasses

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.http import Http404
from django.utils import timezone
from django.utils.crypto import constant_time_compare

import fleet.services as fleet
from billing.models import PreemptionEvent
from core.formatting import format_amount
from core.queueing import publish_on_commit
from core.text import whole_number
from fleet.models import GpuFlavor, unknown_flavor
from quotas import admission, policy
from teams.models import Role, Team
from teams.permissions import check_may_end, get_for_user, get_membership, require_team
from teams.services import audit, audit_write
from workloads import lifecycle, secrets
from workloads import services as workloads
from workloads.estimates.preview import Preview, preview_request
from workloads.events import workload_moved
from workloads.models import ReasonCode
from workloads.registry import kind_of
from workspaces import access, local, tasks
from workspaces import constants as c
from workspaces.constants import PauseCause, Words, WorkspaceState
from workspaces.manifests import TOKEN_ENV, base_url, workspace_host
from workspaces.models import Workspace, WorkspacePolicy
from workspaces.validation import parse_workspace_request


class WorkspaceConflict(Exception):
    """The workspace's state does not allow the action (the API answers 409)."""


#: Names are unique among the team's unfinished workspaces (docs/glossary.md): paused ones included.
NAME_TAKEN = "The team already has a workspace named {name!r} that is not deleted or failed."


def get_workspace_for_user(user, pk, role: str = Role.VIEWER, staff_reads: bool = False) -> Workspace:
    """The workspace ``pk`` if ``user`` may see it: 404 for outsiders, 403 when ``role`` is not met.

    Seeing is the team's (its list shows its workspaces); opening one is its owner's (:func:`authorize`).
    """
    return get_for_user(Workspace.objects.select_related("team", "flavor", "created_by"), user, role,
                        staff_reads=staff_reads, pk=pk)


def team_policy(team: Team) -> WorkspacePolicy:
    """The team's workspace settings (the defaults when staff set none; nothing written)."""
    return WorkspacePolicy.objects.filter(team=team).first() or WorkspacePolicy(team=team)


def _shape(fields: dict) -> policy.Shape:
    """What a workspace asks of its flavor: interactive work in one pod of ``gpus`` units (not training:
    a notebook on a time-sliced or MPS unit is what shared flavors are for)."""
    return policy.Shape(training=False, units_per_pod=fields["gpus"])


def _checked(team: Team, fields: dict, *, for_preview: bool = False) -> GpuFlavor:
    """The flavor of a request once every database check passed (field errors otherwise), with the
    team's policy applied to ``fields`` (its default priority, idle window and maximum)."""
    rules = team_policy(team)
    if fields["idle_minutes"] is None:
        fields["idle_minutes"] = min(c.DEFAULT_IDLE_MINUTES, rules.max_idle_minutes)
    if fields["priority"] is None:
        fields["priority"] = rules.default_priority
    if for_preview:
        flavor = GpuFlavor.objects.filter(name=fields["flavor"]).first()
        errors = {} if flavor is not None and not flavor.refusal() else {
            "flavor": [flavor.refusal() if flavor else unknown_flavor(fields["flavor"])]}
    else:
        flavor, errors = workloads.check_flavor_and_name(Workspace, team, fields["flavor"], fields["name"],
                                                         NAME_TAKEN.format(name=fields["name"]),
                                                         fields.get("cluster_selector"))
    if fields["idle_minutes"] > rules.max_idle_minutes:
        errors["idle_minutes"] = [f"At most {rules.max_idle_minutes} minutes in team {team.slug} (set by platform "
                                  "staff)."]
    if flavor is not None:
        errors.update(policy.refusals(flavor, _shape(fields)).errors(units_field="gpus"))
    if "flavor" not in errors:
        errors.update(workloads.reservation_errors(team, flavor, fields.get("for_reservation"), fields["gpus"],
                                                   fields["spot"]))
    if errors:
        raise ValidationError(errors)
    return flavor


def _target(workspace: Workspace) -> str:
    return f"workspace {workspace.pk} ({workspace.name})"


def create_workspace(user, team: Team | str, data: dict) -> Workspace:
    """Create a workspace for ``team`` (a Team or its slug); returns it admitted or queued.

    Raises ``ValidationError`` (field errors; nothing written), ``PermissionDenied`` below the
    member role, ``Http404`` for outsiders.
    """
    # 1. Access and input (the access check loads the team when given its slug).
    team = require_team(user, team, Role.MEMBER).team
    fields = parse_workspace_request(data)
    flavor = _checked(team, fields)
    fields.pop("flavor")

    # 2. Record (with its token, sealed) and admit in one transaction: a rejection rolls both back.
    try:
        with transaction.atomic():
            workspace = Workspace.objects.create(team=team, created_by=user, flavor=flavor, **fields)
            # The token is Slipway's own value in the workspace's env Secret: not one of the names people see.
            secrets.store(workspace, (), hidden=((TOKEN_ENV, access.new_token()),))
            # The audit row is written with the admission (one round trip under the team's lock).
            decision = workloads.admit_new(workspace, lambda decided, _now: [audit_write(
                c.AUDIT_CREATED, actor=user, team=team, target=_target(workspace), flavor=flavor.name,
                units=workspace.gpus, home_gb=workspace.home_gb, outcome=decided.outcome)])
            if decision.rejected:
                raise ValidationError(workloads.rejection_errors(decision, "gpus", "gpus"))
    except IntegrityError:
        # Two creations with one name raced past the check above; the constraint decided.
        raise ValidationError({"name": [NAME_TAKEN.format(name=fields["name"])]}) from None
    return workspace


def preview_workspace(team: Team, data: dict) -> Preview:
    """What creating the workspace would do now (docs/glossary.md "preview"); nothing written.

    Raises ``ValidationError`` for bad input, as :func:`create_workspace` would.
    """
    fields = parse_workspace_request(data)
    flavor = _checked(team, fields, for_preview=True)
    draft = Workspace(team=team, flavor=flavor, **{k: v for k, v in fields.items() if k != "flavor"})
    result = preview_request(team, kind_of(draft).resource_request(draft), flavor, None, draft.price_quote())
    # No end: in all, this month, it costs what the budget counts.
    return dataclasses.replace(result, open_ended=True,
                               warnings=policy.warnings(flavor, _shape(fields), fields["gpu_memory_gb"]))


def token_of(workspace: Workspace) -> str | None:
    """Its Jupyter token (None once it ended: the values are dropped with it). For the two doors only."""
    return access.credentials(workspace)[0]


def rotate_token(workspace: Workspace) -> bool:
    """Give ``workspace`` a new Jupyter token (in the caller's transaction): whoever could open it before must not
    be able to after. Every ticket and cookie issued before stops opening it (they carry the old access version),
    and a running server gets the new token (:func:`workspaces.tasks.restart_server`, after commit). False when
    it has no token left (it ended)."""
    changed = access.rotate(workspace)
    if changed and Workspace.objects.filter(pk=workspace.pk, state__in=c.SERVING_STATES).exists():
        publish_on_commit(tasks.restart_server, workspace.pk)
    return changed


def _pause_words(workspace: Workspace, cause: str, now, user=None, detail: str = "") -> str:
    if cause == PauseCause.MANUAL:
        return Words.PAUSED_BY.format(user=user.username, home_gb=workspace.home_gb)
    if cause == PauseCause.IDLE:
        return Words.PAUSED_IDLE.format(minutes=workspace.idle_minutes, threshold=settings.SLIPWAY_IDLE_UTIL_PCT,
                                        saved=format_amount(workspace.running_cost_per_hour, precise=True), currency=settings.SLIPWAY_CURRENCY,
                                        home_gb=workspace.home_gb)
    if cause == PauseCause.PREEMPTED:
        return Words.PAUSED_PREEMPTED.format(preempted=detail or "preempted", home_gb=workspace.home_gb)
    if cause == PauseCause.FAILED:
        return Words.PAUSED_FAILED.format(detail=detail or "its pod failed", home_gb=workspace.home_gb)
    return Words.PAUSED_BUDGET.format(home_gb=workspace.home_gb)


def pause(workspace: Workspace, cause: str, now=None, *, user=None, detail: str = "", preempted: bool = False) -> bool:
    """Pause ``workspace``: its pods deleted, its billing closed, its quota given back, its home volume kept.

    Under the team's admission lock (the order admission takes), conditional on it holding quota and
    not being preempted: a reconcile cycle or a user racing it pauses once. The freed units go to the
    team's queue at once; its owner is told (the ``workload_moved`` signal: notifications), the reason
    saying why and, when idle, what pausing saves per hour. False when there was nothing to pause.

    ``preempted``: its pods are gone after a preemption (:meth:`WorkspaceKind.after_preemption`): it is
    paused rather than queued again, so the borrowed units it lost are not taken back by its own
    queue entry the moment they free, and its owner resumes it when they need it.
    """
    now = now or timezone.now()
    words = _pause_words(workspace, cause, now, user, detail)[:500]
    with transaction.atomic():
        admission.lock_admission(workspace.team)
        stopping = {"preempting_since": workspace.preempting_since} if preempted else {"preempting_since__isnull": True}
        updated = Workspace.objects.filter(pk=workspace.pk, state__in=c.PAUSABLE_STATES, **stopping).update(
            preempting_since=None, state=WorkspaceState.PAUSED, pause_cause=cause, paused_at=now, reason=words, reason_code=ReasonCode.NONE,
            admitted_at=None, applied_at=None, apply_started_at=None, apply_attempts=0, attempt_started_at=None,
            idle_since=None, last_activity_at=None, activity_checked_at=None, kernels_busy=0)
        if not updated:
            return False
        lifecycle.cap_billing(workspace, 0, now)  # what ran is billed to now; nothing runs from here on
        admission.release(workspace.ref)
        admission.admit_waiting(workspace.team)
        audit(c.AUDIT_PAUSED, actor=user, team=workspace.team, target=_target(workspace), cause=cause)
        workload_moved.send(sender=Workspace, workload=workspace, state=WorkspaceState.PAUSED, reason=words, at=now)
        publish_on_commit(tasks.stop_pods, workspace.pk)
    return True


def last_preemption_words(workspace: Workspace) -> str:
    """The words of its latest preemption ("preempted: team nlp reclaimed 1× a100-1g.10gb …"), "" when none."""
    return PreemptionEvent.objects.filter(ref=workspace.ref).order_by("-at", "-pk").values_list(
        "reason", flat=True).first() or ""


def pause_by_user(user, workspace: Workspace) -> Workspace:
    """The owner's (or a team admin's) pause: :func:`pause` for ``user``. Who may: as for deleting it."""
    check_may_end(user, workspace)
    if not pause(workspace, PauseCause.MANUAL, user=user):
        workspace.refresh_from_db()
        raise WorkspaceConflict(f"The workspace is {workspace.state}: only one holding quota can be paused.")
    workspace.refresh_from_db()
    return workspace


def resume(user, workspace: Workspace) -> Workspace:
    """Admit a paused workspace again, like new work: running soon, or queued with the usual reason and
    start estimate. Its next attempt mounts the same home volume, on the cluster that has it."""
    check_may_end(user, workspace)
    with transaction.atomic():
        admission.lock_admission(workspace.team)
        if not Workspace.objects.filter(pk=workspace.pk, state__in=c.RESUMABLE_STATES).update(
                state=WorkspaceState.QUEUED, attempt=F("attempt") + 1, pause_cause=PauseCause.NONE, paused_at=None):
            workspace.refresh_from_db()
            raise WorkspaceConflict(f"The workspace is {workspace.state}: only a paused one can be resumed.")
        workspace.refresh_from_db()
        rotate_token(workspace)  # its next server starts with a token no one held before the pause
        decision = workloads.admit_new(workspace, lambda decided, _now: [audit_write(
            c.AUDIT_RESUMED, actor=user, team=workspace.team, target=_target(workspace), outcome=decided.outcome)])
        if decision.rejected:
            raise ValidationError(workloads.rejection_errors(decision, "gpus", "gpus"))
    return workspace


def delete_workspace(user, workspace: Workspace) -> Workspace:
    """Delete ``workspace`` and its home volume: quota released at once, objects deleted, ``deleted`` once gone.

    Who may is :func:`teams.permissions.may_end`. The pages and the CLI ask first, naming the volume's size.
    """
    check_may_end(user, workspace)
    with transaction.atomic():
        if not workloads.end_by_user(workspace, Words.DELETED_BY.format(user=user.username,
                                                                        home_gb=workspace.home_gb)):
            workspace.refresh_from_db()
            raise WorkspaceConflict(f"The workspace is already {workspace.state}.")
        audit(c.AUDIT_DELETED, actor=user, team=workspace.team, target=_target(workspace), home_gb=workspace.home_gb)
        publish_on_commit(tasks.remove_local, workspace.pk)
    workspace.refresh_from_db()
    return workspace


def set_shared(user, workspace: Workspace, shared: bool) -> Workspace:
    """Let the team's admins open the workspace too, or no longer (its owner only). Unsharing rotates its token:
    an admin who opened it may have read the token in a notebook, and must not keep a way in."""
    if workspace.created_by_id != user.pk:
        require_team(user, workspace.team, Role.MEMBER)
        raise PermissionDenied("Only the workspace's owner shares it.")
    with transaction.atomic():
        # Conditional on the change: unsharing what was shared rotates once, however many ask at once.
        if Workspace.objects.filter(pk=workspace.pk).exclude(shared_with_admins=shared).update(
                shared_with_admins=shared) and not shared:
            rotate_token(workspace)
        audit(c.AUDIT_SHARED, actor=user, team=workspace.team, target=_target(workspace), shared_with_admins=shared)
    workspace.shared_with_admins = shared
    return workspace


class NotOpen(Exception):
    """The workspace does not run: there is no Jupyter server to open (the API answers 409)."""


def check_may_open(user, workspace: Workspace) -> None:
    """404 outside its team (its existence stays hidden), 403 for a teammate it is not shared with."""
    membership = get_membership(user, workspace.team)
    if membership is None:
        raise Http404("Not found.")
    if not workspace.may_open(user, membership):
        raise PermissionDenied("Only the workspace's owner opens it (and the team's admins, if the owner shares it).")


def origin(workspace: Workspace) -> str:
    """The address of the workspace's own host, where its notebook is served (never the portal's host).

    On a sandbox cluster the proxy's (:mod:`workspaces.proxy`): ``http://ws-7.localhost:<proxy port>``; on a
    real cluster its Ingress's: ``https://ws-7.<SLIPWAY_WORKSPACE_HOST>``. Raises :class:`NotOpen` while a
    sandbox workspace's local server does not run yet.
    """
    if local.server_of(workspace) is not None:
        return f"http://{workspace_host(workspace.object_name, 'localhost')}:{settings.SLIPWAY_WORKSPACE_PROXY_PORT}"
    if fleet.backend_at(workspace.cluster_id).name == "sandbox":
        raise NotOpen("The workspace's local Jupyter server is not running yet: try again in a moment.")
    return f"https://{workspace_host(workspace.object_name, settings.SLIPWAY_WORKSPACE_HOST)}"


def open_url(user, workspace: Workspace) -> str:
    """The way into its notebook for ``user`` (only when :meth:`Workspace.may_open`): its own host's address with
    a one-use ticket (:mod:`workspaces.access`), which the host's gate exchanges for the workspace's cookie.

    Slipway hands out no Jupyter token (Jupyter's own page carries it: docs/workspaces.md). Audited without the
    address. Raises :class:`NotOpen` while it does not run.
    """
    check_may_open(user, workspace)
    if workspace.state != WorkspaceState.RUNNING:
        raise NotOpen(f"The workspace is {workspace.state}: open it once it runs.")
    where = origin(workspace)
    ticket = access.issue_ticket(user, workspace.pk, access.credentials(workspace)[1])
    audit(c.AUDIT_OPENED, actor=user, team=workspace.team, target=_target(workspace))
    # JupyterLab's page (the server's own root is Jupyter Server's bare landing page, not the notebook UI).
    return f"{where}{base_url(workspace.object_name)}lab?{access.TICKET_PARAM}={ticket}"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The gate's answer about one request to a workspace's host (:func:`authorize`).

    ``status``: 200 (let it through, with ``token`` for the Jupyter server), 401 (no valid ticket or cookie:
    send the browser to the portal's Open), 403 (signed in, not allowed on it), 404 (not found, deleted, or
    not in one of the user's teams), 409 (it does not run: paused, queued, starting). ``cookie``: a workspace
    cookie to set (a ticket was redeemed, or a cookie in use is renewed).
    """

    status: int
    token: str = ""
    cookie: str = ""


def _pk(value) -> int | None:
    return whole_number(value, 18)


def authorize(pk, *, cookie: str = "", ticket: str = "") -> Verdict:
    """May the holder of ``cookie`` (a workspace cookie) or ``ticket`` (from the portal's Open) reach workspace
    ``pk``'s server? The one check of every request to a workspace's host: the ingress controller's auth-url
    (``/workspaces/auth/``) and the sandbox's proxy both ask it. The portal's session plays no part.

    A pass is only good for the workspace it names, at the access version it names (a rotated token ends
    it), for an active user (and a cookie, for their session hash as it is). The user's right is checked
    now, on every request: a member who left, or an admin it is no longer shared with, is refused at once.
    """
    number = _pk(pk)
    found = access.redeem_ticket(ticket, number) if ticket and number is not None else None
    from_cookie = None if found is not None or number is None else access.read_cookie(cookie, number)
    found = found or from_cookie
    if found is None:
        return Verdict(401)
    user = get_user_model().objects.filter(pk=found.user_id, is_active=True).first()
    if user is None or (from_cookie is not None and not access.session_matches(user, from_cookie)):
        return Verdict(401)
    workspace = Workspace.objects.select_related("team").filter(pk=number).first()
    if workspace is None or workspace.state in c.CLOSED_STATES:
        return Verdict(404)
    membership = get_membership(user, workspace.team)
    if membership is None:
        return Verdict(404)
    if not workspace.may_open(user, membership):
        return Verdict(403)
    token, version = access.credentials(workspace)
    if not token or not constant_time_compare(found.version, version):
        return Verdict(401)  # issued before its token was rotated: through the portal's Open again
    if workspace.state != WorkspaceState.RUNNING:
        return Verdict(409)
    renewed = access.make_cookie(user, workspace.pk, version) if from_cookie is None or access.needs_refresh(found) else ""
    return Verdict(200, token, renewed)


def member_left(sender, instance, **kwargs) -> None:
    """``post_delete`` of a team membership (connected in :class:`workspaces.apps.WorkspacesConfig`): removed by
    a team admin or single sign-on's sync, or by cascade with its user or team. Its person holds nothing of
    the team any more."""
    rotate_lost_ways_in(instance, None)


def member_changed(sender, before, membership, **kwargs) -> None:
    """:data:`teams.events.membership_changed` (connected in :class:`workspaces.apps.WorkspacesConfig`): a role
    changed, or the membership moved to another user or team, whose old person then holds nothing of the team."""
    same_person = (membership.user_id, membership.team_id) == (before.user_id, before.team_id)
    rotate_lost_ways_in(before, membership if same_person else None)


def rotate_lost_ways_in(before, after) -> int:
    """The person of membership ``before`` now holds ``after`` of its team (None: nothing): the workspaces
    ``before`` let them open and ``after`` does not get new tokens. Their own once they are out of the team;
    the ones shared with admins once they are no longer an admin, and only those: a token they could read
    in JupyterLab's page must open nothing once the way in is lost. Decided by :meth:`Workspace.may_open`,
    the rule the gate applies. Returns how many were rotated."""
    person = before.user
    rotated = 0
    maybe = Q(created_by_id=before.user_id) | Q(shared_with_admins=True)
    for workspace in Workspace.objects.filter(maybe, team_id=before.team_id).exclude(state__in=c.FINAL_STATES):
        if workspace.may_open(person, before) and not workspace.may_open(person, after):
            rotated += rotate_token(workspace)
    return rotated
