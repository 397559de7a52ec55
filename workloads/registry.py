"""The kind registry: how the shared machinery learns about each kind of workload.

A *kind* is a workload kind (docs/glossary.md "workload kind"): runs, endpoints, workspaces. What Kubernetes
calls a kind is a *resource kind* here (:attr:`WorkloadKind.resources`). A kind's work has objects on a
cluster, which the reconcile cycle follows, unless it declares it has none
(:attr:`WorkloadKind.cluster_objects`: work that only holds units, docs/glossary.md "kind without cluster
objects").

A kind (training runs, inference endpoints, …) subclasses :class:`WorkloadKind` and
registers one instance from its AppConfig's ``ready()``. The reconcile cycle, the apply and
delete tasks and the ``workload_admitted`` receiver dispatch through :func:`kind_for`, so
adding a kind changes nothing here.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import cache

from django.conf import settings

from billing.ledger import RefLabel
from cluster.backends.base import ObservedWorkload, ResourceKind
from cluster.status import WorkloadStatus
from quotas.decide import ResourceRequest
from teams.models import Role, declare_audit_actions
from workloads.identity import WorkloadId
from workloads.models import PORTAL_STEPS


@dataclass(frozen=True)
class Lifecycle:
    """The states of one kind that the shared machinery moves a workload between.

    The final states and those holding quota (which the reconciler follows on the cluster)
    are the model's ``FINAL_STATES`` and ``HOLDING_STATES``.
    """

    queued: str  #: waiting for quota
    admitted: str  #: holds its hold, cluster objects not applied yet
    applied: str  #: what a successful first apply moves ``admitted`` to
    failed: str
    ended: str  #: where the user's end (cancel, delete) moves it
    applyable: tuple[str, ...]  #: states in which the apply task (re)applies its objects
    removed: tuple[str, ...]  #: states whose cluster objects must not exist (leftovers are deleted)
    #: When ``ended`` is not final: the final state once its cluster objects are gone.
    gone: str | None = None
    #: Where work a sweep's pruner stopped ends once its pods have saved and gone (:func:`workloads.lifecycle.stop`):
    #: a final state of its own, never ``failed``. None: the kind's work is never pruned (a kind with
    #: :class:`Trials` names one).
    pruned: str | None = None
    #: The field of the kind's model naming the workload whose kept objects (a checkpoint claim) this one goes on
    #: from (a sweep's continued trial): those are kept while a workload resuming them lives, whatever the rule for
    #: the one that made them (:func:`workloads.cycle.leftovers.delete_kept`). None: no work of the kind resumes
    #: another's.
    resumes: str | None = None


class WorkloadKind(abc.ABC):
    """What one kind of workload must tell the shared machinery: its narrow core. Subclass and :func:`register` it.

    **Required** (ten): the declarations :attr:`model`, :attr:`noun`, :attr:`lifecycle` and
    :attr:`conflict_error`, and the methods :meth:`resource_request`, :meth:`manifests`, :meth:`status`,
    :meth:`state_for`, :meth:`get_for_user` and :meth:`end` (abstract: a kind lacking one cannot be made).
    Declared only where they apply, with defaults: its :attr:`resources` (or ``cluster_objects = False``),
    the fields its status reads (:attr:`observed_fields`) and what its work commits (:attr:`committed_units`,
    :attr:`runtime_limit`). Everything else is an optional **capability** (:class:`Capability`), a small
    class a kind inherits to have it — :class:`Reactions`, :class:`Checkpoints`, :class:`Bursts`,
    :class:`Pages`, :class:`StaffActions`, :class:`Demo`, :class:`Estimates`, :class:`Api`,
    :class:`Announces` — which the shared code asks for (``Checkpoints.of(kind)``, ``isinstance``) rather
    than finding a stub that raises at run time.
    """

    #: The concrete :class:`workloads.models.Workload` model; its ``KIND_PREFIX`` names the kind.
    model: type
    #: What people call one ("run", "endpoint"), for messages.
    noun: str
    lifecycle: Lifecycle
    #: What :meth:`end` raises when the workload's state allows no end (a 409, a message).
    conflict_error: type[Exception]
    #: The cluster resource kinds its manifests create, which the backends observe and delete
    #: for it (in this order: what must go first comes first). Their only declaration.
    resources: tuple[ResourceKind, ...] = ()
    #: Whether its work has objects on a cluster, through which the reconcile cycle follows it. False: a
    #: kind whose work only holds units of a flavor on a cluster, with no pods at all (the calendar
    #: reservations to come: a team's N units held for a window). Declared, not inferred from empty
    #: :attr:`resources`, so that a kind that forgets its resources is refused rather than taken for one.
    #: For such a kind nothing is applied (the apply task only places it), observed or deleted; the cycle
    #: never calls it vanished nor deletes leftovers for it; its :meth:`status` is asked of the kind every
    #: cycle (``observed`` None), and billing charges the ``running_units`` that status says are in use,
    #: on its hold's open segment like any work. It declares no :attr:`resources` and no ``Lifecycle.gone``.
    cluster_objects: bool = True
    #: Fields of the kind's own the reconcile cycle reads (it loads only the shared ones otherwise).
    observed_fields: tuple[str, ...] = ()
    #: How admitted work commits money (:func:`billing.ledger.committed_by_team`, from what its hold
    #: carries: :meth:`admission_request`), as columns of the kind's table: the product of
    #: ``committed_units`` is the GPU units it holds (none named: it commits nothing), and
    #: ``runtime_limit`` its runtime limit in minutes from its start. Work without a limit (an empty
    #: limit, or a kind without a limit column, which runs until deleted) commits until the month's
    #: end, as admission counted it.
    committed_units: tuple[str, ...] = ()
    runtime_limit: str | None = None

    @abc.abstractmethod
    def resource_request(self, workload) -> ResourceRequest:
        """What ``workload`` asks of the team's quota at admission: its units and units per node are
        the model's ``placement_shape`` (the one rule that placement and the price read too)."""

    @abc.abstractmethod
    def manifests(self, workload) -> list[dict]:
        """The Kubernetes objects of ``workload`` (pure builders; the team's namespace objects excluded).

        A kind without :attr:`cluster_objects` has none ([]): what its manifest view shows; never applied."""

    def fix_applied(self, workload, cluster) -> None:
        """Record what ``workload``'s attempt is applied as where that hangs on ``cluster``'s setup, which may
        change while the attempt runs (a run's training API: docs/training.md "Moving a cluster from v1 to v2"),
        so that what reads the attempt later reads what was applied. The apply task calls it on every try, after
        placement and before it renders; a kind keeps what the attempt's first try fixed (that try may have
        reached the cluster). Nothing to fix for most kinds."""
        return None

    @abc.abstractmethod
    def status(self, observed: ObservedWorkload | None, workload, now: datetime) -> WorkloadStatus | None:
        """Map what the cluster shows to a status; None when its main object does not exist.

        A kind without :attr:`cluster_objects` has nothing on a cluster to show: it is asked every cycle with
        ``observed`` None and says itself what its work is at ``now`` (a window opened and closed by the
        clock), its ``running_units`` being the units in use — what billing charges, from ``started_at``
        and, once final, up to ``finished_at``, even when no cycle saw it in between. None from such a kind
        means nothing to say this cycle: the work is left as it is (it has no objects that could vanish).
        """

    @abc.abstractmethod
    def state_for(self, status: WorkloadStatus, workload) -> str:
        """The portal state ``status`` means for ``workload``."""

    @abc.abstractmethod
    def get_for_user(self, user, pk: int, role: str = Role.VIEWER, staff_reads: bool = False):
        """The workload ``pk`` if ``user`` may see it (404 for outsiders, 403 below ``role``): the kind's access helper."""

    @abc.abstractmethod
    def end(self, user, workload):
        """The user's end of ``workload`` through the kind's service (audited, quota released); it as written.

        Raises :attr:`conflict_error` when it already ended, ``PermissionDenied`` when ``user`` may not.
        """

    # -- derived from the declarations above: no kind overrides these ------------------------------------

    @property
    def attempt_resources(self) -> tuple[ResourceKind, ...]:
        """:attr:`resources` as deleting one attempt's objects sees them: what outlives attempts kept."""
        return tuple(replace(r, deleted=False) if r.kept_across_attempts else r for r in self.resources)

    def committed(self, workload) -> int:
        """The units ``workload`` commits money for: the product of its :attr:`committed_units` columns (0: none)."""
        if not self.committed_units:
            return 0
        return math.prod(int(getattr(workload, column) or 0) for column in self.committed_units)

    def runtime_left(self, workload) -> timedelta | None:
        """What its current attempt may run: its :attr:`runtime_limit` less what its earlier attempts ran
        (``earlier_run_seconds``), never below nothing; None without a limit. A limit counts every attempt, as
        Kueue's ``maximumExecutionTimeSeconds`` does, so a preempted run does not start its limit over
        (docs/glossary.md "runtime limit")."""
        minutes = getattr(workload, self.runtime_limit) if self.runtime_limit else None
        if not minutes:
            return None
        return max(timedelta(minutes=minutes, seconds=-workload.earlier_run_seconds), timedelta(0))

    def admission_request(self, workload) -> ResourceRequest:
        """:meth:`resource_request` as admission records it on the hold: with what the hold commits
        (:meth:`committed`, for what is left of its runtime limit, in whole minutes rounded up: :meth:`runtime_left`)
        and who asked (its cost is reported under them)."""
        left = self.runtime_left(workload)
        limit = math.ceil(left.total_seconds() / 60) if left is not None else None
        return replace(self.resource_request(workload), committed_units=self.committed(workload),
                       limit_minutes=limit, user_id=workload.created_by_id)

    @property
    def plural(self) -> str:
        """What people call several ("runs"): a kind whose plural is not its noun and an "s" overrides it."""
        return f"{self.noun}s"

    @property
    def prefix(self) -> str:
        """Identity prefix: ``run`` → refs ``run:42``, object names ``run-42``."""
        return self.model.KIND_PREFIX

    def identity(self, pk: int) -> WorkloadId:
        return WorkloadId(self.prefix, pk)


class Capability:
    """An optional part of the kind interface: a kind has it by inheriting it (``class RunKind(WorkloadKind,
    Checkpoints, …)``). The shared code asks ``Cap.of(kind)``: the kind itself when it has the capability, else
    the capability's plain behaviour — what a kind without it does, stated once, here — or tests
    ``isinstance(kind, Cap)`` where having it changes the path taken (a burst shrunk rather than work stopped).
    """

    @classmethod
    def of(cls, kind):
        """``kind`` when it has this capability, else the capability's plain behaviour."""
        return kind if isinstance(kind, cls) else _plain(cls)


@cache
def _plain(capability: type[Capability]) -> Capability:
    return capability()


class Reactions(Capability):
    """How the reconcile cycle follows its work, beyond the shared rule: more columns an observation changes,
    reasons of its own, units billed other than the running pods', acts after an observation, after a
    preemption, on a spent budget, and on a disrupted pod."""

    def column_changes(self, workload, status: WorkloadStatus) -> dict:
        """Kind-specific columns an observation changes (e.g. an endpoint's replica counts)."""
        return {}

    def observed_reason(self, workload, status: WorkloadStatus, new_state: str) -> str:
        """The ``reason`` an observation gives ``workload``: derived again every cycle, never left stale.

        The cluster's words when it has any, else none — except the portal's own word for the
        step it took ("submitted to the cluster"), which holds while the state does and the
        cluster has nothing to say yet. A kind with reasons of its own overrides this.
        """
        if not status.reason and new_state == workload.state and workload.reason_code in PORTAL_STEPS:
            return workload.reason
        return status.reason

    def billed_units(self, workload, status: WorkloadStatus) -> int:
        """The GPU units an observation bills: those of its running pods (a kind may cap them); for a kind
        without :attr:`WorkloadKind.cluster_objects`, those its own status says are in use."""
        return status.running_units

    def on_budget_spent(self, workload, now: datetime) -> bool:
        """The team's budget is spent and its policy is "stop": stop what costs (True when quota was freed)."""
        return False

    def after_observation(self, workload, status: WorkloadStatus, now: datetime) -> bool:
        """Act on an observation once it is written (an endpoint grows or shrinks its burst).

        Returns True when the workload gave quota back, so the cycle admits the team's queue.
        """
        return False

    def requeues_when_disrupted(self, workload, status: WorkloadStatus) -> bool:
        """Whether a disrupted pod (``status.disrupted``: its spot node reclaimed …) sends the workload
        back to the queue to resume later, as a preemption does (:func:`workloads.cycle.preemption.interrupt`)."""
        return False

    def after_preemption(self, workload, now: datetime) -> bool | None:
        """A preempted workload whose objects are gone: what becomes of it. None (the default): it is
        queued again at its old place as its next attempt (:func:`workloads.lifecycle.requeue`); a kind
        that does otherwise (a workspace pauses, keeping its home volume) returns whether it moved."""
        return None


class Checkpoints(Capability):
    """Work that reports checkpoints it can resume from (quotas.reclaim takes the victims that lose the least
    since their last one). Without it a kind's victims are assumed to have checkpointed at the median of
    those that do (so silence protects no one), and its pods get the platform's grace to stop."""

    def preemption_grace(self, workload) -> int:
        """Seconds ``workload``'s pods get to stop when preempted (the delete's grace period)."""
        return settings.SLIPWAY_PREEMPTION_GRACE_SECONDS

    def last_checkpoint_at(self, workload) -> datetime | None:
        """When ``workload`` last reported a checkpoint it can resume from (None: never)."""
        return None

    def last_checkpoint(self, workload) -> dict | None:
        """``{"at", "step", "path"}`` of the checkpoint ``workload`` last reported, kept with its attempt
        when it is queued again (:mod:`workloads.attempts`); None: none."""
        return None

    def refresh_checkpoint(self, workload) -> None:
        """Read a checkpoint the workload announced without reporting it (a run's log line), just
        before it is preempted: what it loses, and where its next attempt resumes, follow it."""
        return None

    def reports_checkpoints(self, workload) -> bool:
        """Whether ``workload`` reports checkpoints at all (one that does but has none yet loses all since its start)."""
        return self.last_checkpoint_at(workload) is not None

    def checkpoint_on_its_cluster(self, workload) -> bool:
        """Whether ``workload`` goes on from a checkpoint kept on the cluster it is placed on — in what its kind keeps
        across attempts (a run's checkpoint claim: one cluster's), as a next attempt kept there or a sweep's continued
        trial on the cluster of the run it continues — so that taking it to another cluster, even before it
        started, would lose its work: it is never withdrawn (:func:`workloads.cycle.reconcile._withdraw`) and a
        failed provisioning queues it again on that cluster (:func:`workloads.provisioning.give_back`)."""
        return (workload.cluster_id is not None and self.last_checkpoint_at(workload) is not None
                and any(r.kept_across_attempts for r in self.resources))


class Bursts(Capability):
    """Work whose borrowed units are a burst above a minimum it keeps (an endpoint's replicas): reclaim
    shrinks the burst (:meth:`shrink_burst`) instead of stopping the work, and idle GPUs at the minimum
    are the price of answering at once (:meth:`at_minimum`). Without it, work is stopped and requeued
    (:mod:`workloads.cycle.preemption`)."""

    def shrink_burst(self, workload, units: int, reason: str, now: datetime) -> None:
        """Give back ``units`` borrowed burst units at once (a kind with this capability implements it)."""
        raise NotImplementedError

    def at_minimum(self, workload) -> bool:
        """Whether ``workload`` runs only what it keeps ready on purpose (an endpoint at its minimum
        replicas): its idle GPUs are then the price of answering at once, not work someone forgot —
        the idle alert says so, and how to stop paying for it (:meth:`minimum_url`)."""
        return False

    def minimum_url(self, workload) -> str:
        """The page where its minimum is lowered (asked only when :meth:`at_minimum`; "" for none)."""
        return ""


class Pages(Capability):
    """What the portal's shared pages show of the kind: its navigation item, dashboard panel, polled state
    cell, team pages, Usage card, the page that makes one for a free flavor, and how its end is said. A
    kind without it has no pages of its own (its work still shows on the shared lists and the admin)."""

    #: The user's end of one, as buttons say it ("Cancel", "Delete") and as messages say it is done.
    end_verb: str = "End"
    ended_word: str = "ended"
    #: Its item of the main navigation, and its part of the dashboard (None: none).
    nav: NavItem | None = None
    dashboard: DashboardPanel | None = None
    #: The template (``file#partial``) of its polled state cell; rendered with the workload as
    #: ``<noun>`` and ``position``, its place in the team's queue while queued.
    state_template: str = ""
    #: The URL name (no arguments) of its page for a new one, which takes ``?flavor=``: the quota table
    #: links a flavor with free units there (the first kind in nav order that declares one). "": none.
    new_on_flavor: str = ""
    #: Its pages of a whole team, linked from the team's page (``url_name`` takes the team's slug): an endpoint's
    #: team API keys. Its card on the Usage page (None: none): :class:`TeamPanel`.
    team_pages: tuple[NavItem, ...] = ()
    usage_panel: TeamPanel | None = None

    def end_url(self, workload) -> str:
        """The page where a person ends ``workload`` (it asks to confirm first): an idle alert's link.
        Default: the workload's own page, whose button ends it ("" for a kind without pages)."""
        return workload.get_absolute_url() if hasattr(workload, "get_absolute_url") else ""


class StaffActions(Capability):
    """Actions of platform staff on one workload of the kind besides the end (an endpoint's "scale to minimum")."""

    staff_actions: tuple[StaffAction, ...] = ()


class Demo(Capability):
    """Demo data of the kind, which ``manage.py seed_demo`` asks of every kind."""

    def seed_demo(self, slugs: list[str]) -> list[str]:
        """Seed the demo work of the demo teams ``slugs`` (``manage.py seed_demo``, once per team) through the
        kind's services; the lines the command prints about it. A kind without demo work seeds nothing."""
        return []

    def seed_demo_history(self, slugs: list[str]) -> list[str]:
        """Record the demo teams' (``slugs``) past work with its ledger time (usage history); the lines to print."""
        return []


class Estimates(Capability):
    """What the start estimates learn from the kind's work: which earlier work is the same job
    (:attr:`job_fields`, whose running times predict this one's) and what its own progress says of its end.
    Without it, work with a runtime limit is expected to run to its limit (a window that ends when it says),
    and its limits do not count in how the platform's runs use theirs (:func:`workloads.estimates.forecast.platform_limit_spans`)."""

    #: Columns that make two workloads of a kind with a runtime limit the same job, whose earlier
    #: running times predict this one's (:func:`workloads.estimates.forecast.median_durations`).
    job_fields: tuple[str, ...] = ("name", "flavor_id")

    def progress_ends(self, workloads: list, now: datetime) -> dict[str, datetime]:
        """``{ref: when it should end}`` for those of ``workloads`` (of this kind) whose own reported
        progress says when — a running run's ETA — in a query or so for all of them; {} for a kind whose
        work reports none. The start estimates take it over the typical time."""
        return {}


class Api(Capability):
    """Made through the REST API: its create (:meth:`submit`) and its dry run (:meth:`preview`), which go
    together (``workloads.api.WorkloadViewSet``); a kind with this capability implements both."""

    def submit(self, user, team, fields: dict):
        """Create one from an API request's ``fields`` (access checked by the service); it as written."""
        raise NotImplementedError

    def preview(self, team, fields: dict):
        """What submitting ``fields`` would do now (a dry run; its ``as_dict()`` is the answer); nothing written.

        Bad input raises ``ValidationError`` (a 400), as submitting would.
        """
        raise NotImplementedError


@dataclass(frozen=True)
class TrialReport:
    """What one trial's work reported of a sweep's objective since the sweep last read it (:meth:`Trials.objective`)."""

    #: ``(step, value)`` pairs after the step asked from, in step order.
    points: tuple[tuple[int, float], ...]
    #: The work is final and nothing more of it will be read: its last value is its result.
    settled: bool


class Trials(Capability):
    """Work a sweep runs as its trials (docs/sweeps.md): the sweep renders each trial's fields from its base
    and the parameters Optuna chose, submits them through :class:`Api` (the one admission), reads the objective
    the work reports, and prunes it through the checkpoint contract (:func:`workloads.lifecycle.stop`, ending in
    ``Lifecycle.pruned``); a pruned trial may be continued from its checkpoint by a new trial. A kind with this
    capability has :class:`Api`, implements its four methods and names its pruned state."""

    #: The kind's page that compares its work side by side (what a sweep page's "Compare" opens with the trials
    #: ticked): its URL name (no arguments) and the query parameter that takes each ticked work's id, repeated
    #: (``?<parameter>=12&<parameter>=15``). None: the kind has no such page.
    compare_page: tuple[str, str] | None = None

    def trial_fields(self, fields: dict, name: str, params: dict) -> dict:
        """The fields of one trial named ``name``: the sweep's base ``fields`` with ``params`` put in (as the
        kind's work receives parameters: a run's env and the ``{name}`` placeholders of its args)."""
        raise NotImplementedError

    def objective(self, workloads: list, metric: str, after: dict[int, int]) -> dict[int, TrialReport]:
        """``{workload uid: what it reported of metric}`` for ``workloads`` of this kind, the points after
        ``after[uid]`` (a step; -1: all), in a query or so for them all."""
        raise NotImplementedError

    def continuation_refusal(self, workload) -> str:
        """Why a new trial cannot go on from ``workload``'s checkpoint (a pruned trial's work), in words; "" when
        it can (docs/sweeps.md "Continue a pruned trial")."""
        raise NotImplementedError

    def submit_continuation(self, user, team, fields: dict, workload):
        """Submit a trial of ``fields`` that goes on from ``workload``'s checkpoint, through the one admission as
        :meth:`Api.submit` does (the same errors); its row of the kind's model."""
        raise NotImplementedError


class Announces(Capability):
    """The kind's vocabulary for the apps that record and tell: its state moves that are events people
    subscribe to (:mod:`notifications.events`: a kind's event kinds need no change, and no migration, in
    notifications) and its audit actions (``{action: label}``, declared to teams when it is registered:
    the audit log's column lists no fixed choices, so a kind's actions need no migration in teams)."""

    events: tuple[KindEvent, ...] = ()
    audit_actions: dict[str, str] = {}


@dataclass(frozen=True)
class NavItem:
    """A kind's entry of the main navigation: ``url_name`` takes no arguments; items are shown by ``order``."""

    label: str
    url_name: str
    order: int


@dataclass(frozen=True)
class DashboardPanel:
    """A kind's part of the dashboard.

    ``stat``: the template of its figure card, rendered with ``summary`` (its row of
    :func:`workloads.services.team_summary`) and ``budget``. ``panel``: the template of its
    card below the quota table ("" for none), rendered with ``panel``, what ``context(team)``
    returns. ``new``: (label, URL name) of its button in the dashboard's head, if it has one.
    """

    stat: str
    panel: str = ""
    context: Callable | None = None
    new: tuple[str, str] | None = None


@dataclass(frozen=True)
class TeamPanel:
    """A kind's card on a shared page of a team's month (the Usage page): ``template`` rendered with ``panel``,
    what ``context(team, since, until)`` returns."""

    template: str
    context: Callable


@dataclass(frozen=True)
class KindEvent:
    """A state move of a kind that is an event (docs/notifications.md "event kind").

    ``code`` is the event kind's value (unique among all kinds' and notifications' own; at most 32
    characters), ``label`` what the subscription forms call it, ``verb`` what the event's title says
    after the workload's name ("failed"). ``repeated``: it may happen to one workload again (each
    time is its own event); ``continued``: the move's reason is the rest of the sentence about the
    workload ("paused: idle for 60 min"), the verb said once; ``to_owner``: the workload's owner is
    told too, subscribed or not (their own work stopped under them).
    """

    state: str
    code: str
    label: str
    verb: str
    repeated: bool = False
    continued: bool = False
    to_owner: bool = False


@dataclass(frozen=True)
class StaffAction:
    """An action of platform staff on one workload of the kind (``/admin/workloads/<prefix>/<pk>/<slug>/``).

    Offered on the staff list when ``offered(workload)``; its GET asks with ``consequence(workload)``,
    its POST calls ``act(user, workload)``: True when it changed something (the message says
    ``done``), False when there was nothing to do (``idle``).
    """

    slug: str
    label: str
    offered: Callable
    consequence: Callable
    act: Callable
    done: str
    idle: str


_KINDS: dict[str, WorkloadKind] = {}


#: What every kind declares (class attributes without a default).
REQUIRED_ATTRIBUTES = ("model", "noun", "lifecycle", "conflict_error")


def _overrides(kind: WorkloadKind, capability: type[Capability], name: str) -> bool:
    return getattr(type(kind), name) is not getattr(capability, name)


def _problems(kind: WorkloadKind) -> list[str]:
    """What ``kind`` lacks to be registered, in words; [] when nothing.

    Its abstract methods are checked by Python when it is made (a kind without ``end`` cannot be
    instantiated); these are the rest, found here rather than by the first request that needs one: the
    attributes every kind declares, and what a capability it took needs — a kind with :class:`Bursts` gives
    its burst back (:meth:`Bursts.shrink_burst`), one with :class:`Api` implements both its create and its
    dry run. A kind either has cluster objects and names their resource kinds, or declares it has none
    (:attr:`WorkloadKind.cluster_objects`) and names none, nor a state its objects' removal would end in
    (``Lifecycle.gone``): the cycle would otherwise wait for objects that never exist, or fail as vanished
    work that never had any.
    """
    found = [f"it declares no {name}" for name in REQUIRED_ATTRIBUTES if getattr(kind, name, None) is None]
    if kind.cluster_objects and not kind.resources:
        found.append("it declares no resources (a kind whose work has no cluster objects sets cluster_objects = False)")
    if not kind.cluster_objects and kind.resources:
        found.append("it sets cluster_objects = False but declares resources")
    if not kind.cluster_objects and getattr(getattr(kind, "lifecycle", None), "gone", None) is not None:
        found.append("it sets cluster_objects = False but its lifecycle has a gone state (no objects to wait for)")
    if getattr(kind, "model", None) is not None and not isinstance(getattr(kind.model, "KIND_PREFIX", None), str):
        found.append("its model has no KIND_PREFIX")
    if isinstance(kind, Bursts) and not _overrides(kind, Bursts, "shrink_burst"):
        found.append("it has Bursts but does not implement shrink_burst")
    if isinstance(kind, Trials):
        found += [f"it has Trials but does not implement {name}"
                  for name in ("trial_fields", "objective", "continuation_refusal", "submit_continuation")
                  if not _overrides(kind, Trials, name)]
        if not isinstance(kind, Api):
            found.append("it has Trials but not Api (a sweep submits its trials through the kind's create)")
        pruned = getattr(getattr(kind, "lifecycle", None), "pruned", None)
        if pruned is None or pruned not in getattr(getattr(kind, "model", None), "FINAL_STATES", ()):
            found.append("it has Trials but its lifecycle names no final pruned state")
    if isinstance(kind, Api):
        found += [f"it has Api but does not implement {name} (the API's create and its dry run go together)"
                  for name in ("submit", "preview") if not _overrides(kind, Api, name)]
    return found


def register(kind: WorkloadKind) -> WorkloadKind:
    """Add ``kind`` to the registry (registering the same kind again replaces it).

    Raises ``TypeError`` naming what it lacks (:func:`_problems`), ``ValueError`` for a bad or taken prefix.
    """
    lacking = _problems(kind)
    if lacking:
        raise TypeError(f"{type(kind).__name__} cannot be registered: {'; '.join(lacking)}.")
    if not kind.prefix.isascii() or not kind.prefix.isalpha() or not kind.prefix.islower():
        raise ValueError(f"a kind prefix is lowercase letters only, got {kind.prefix!r}")
    existing = _KINDS.get(kind.prefix)
    if existing is not None and type(existing) is not type(kind):
        raise ValueError(f"prefix {kind.prefix!r} is taken by {type(existing).__name__}")
    declare_audit_actions(Announces.of(kind).audit_actions)
    _KINDS[kind.prefix] = kind
    return kind


def kinds() -> list[WorkloadKind]:
    return list(_KINDS.values())


def resource_kinds() -> tuple[ResourceKind, ...]:
    """Every registered kind's resource kinds, each once, in registration order: what a reconcile
    cycle observes. A resource kind two kinds declare is observed or deleted when either says so."""
    merged: dict[tuple[str, str], ResourceKind] = {}
    for kind in _KINDS.values():
        for resource in kind.resources:
            key = (resource.api_version, resource.kind)
            seen = merged.get(key)
            merged[key] = resource if seen is None else replace(
                seen, observed=seen.observed or resource.observed, deleted=seen.deleted or resource.deleted)
    return tuple(merged.values())


def kinds_in_words() -> str:
    """The kinds as a page says them: "runs, endpoints and workspaces" (each kind's :attr:`WorkloadKind.plural`),
    so a shared page's sentence about every kind stays true when one is added."""
    plurals = [kind.plural for kind in kinds()]
    return " and ".join([", ".join(plurals[:-1]), plurals[-1]] if len(plurals) > 1 else plurals)


def resource_declarations(of: list[WorkloadKind] | None = None) -> list[tuple[str, ResourceKind]]:
    """(the kind's plural name, resource kind) for each resource each kind (of ``of``, default every registered
    one) declares: what the ClusterRole must grant (:func:`cluster.rbac.render`, ``manage.py rbac``)."""
    return [(str(kind.model._meta.verbose_name_plural), resource)
            for kind in (kinds() if of is None else of) for resource in kind.resources]


def kind_nouns() -> dict[str, str]:
    """``{prefix: noun}`` ("ep" → "endpoint"): what the cost report by kind calls each (registered with quotas)."""
    return {prefix: kind.noun for prefix, kind in _KINDS.items()}


def kind_names() -> dict[str, str]:
    """``{prefix: "Runs"}``: each kind as a heading or a report's row calls it (the Usage page's card
    by kind; quotas' reports group the ledger by prefix and cannot read the registry)."""
    return {prefix: kind.plural.capitalize() for prefix, kind in _KINDS.items()}


def kind_for(prefix: str) -> WorkloadKind | None:
    return _KINDS.get(prefix)


def kind_of(workload) -> WorkloadKind:
    """The registered kind of a workload instance (a kind's, or a row of the one table read across kinds)."""
    return _KINDS[workload.KIND_PREFIX or workload.kind]


def label_of(workload) -> RefLabel:
    """What people call ``workload`` (its kind, name, id and team): ``label_of(run).words()`` is
    "run train-llama (#12) of team nlp" (:meth:`billing.ledger.RefLabel.words`). Reads ``workload.team``."""
    url = workload.get_absolute_url() if hasattr(workload, "get_absolute_url") else ""
    return RefLabel(workload.name, url, kind_of(workload).noun, workload.pk, workload.team.slug)


def pks_by_kind(refs) -> dict[WorkloadKind, list[int]]:
    """The primary keys of ``refs`` per registered kind (refs of no registered kind left out): to read
    them with one query per kind."""
    by_kind: dict[WorkloadKind, list[int]] = {}
    for ref in refs:
        identity = WorkloadId.from_ref(ref)
        kind = kind_for(identity.prefix) if identity is not None else None
        if kind is not None:
            by_kind.setdefault(kind, []).append(identity.pk)
    return by_kind


def labels(refs) -> dict[str, RefLabel]:
    """``ref -> RefLabel`` (:func:`label_of`) of the workloads among ``refs`` that exist (one query per kind)."""
    found = {}
    for kind, pks in pks_by_kind(refs).items():
        for workload in kind.model.objects.filter(pk__in=pks).select_related("team").only("pk", "name", "team__slug"):
            found[workload.ref] = label_of(workload)
    return found
