"""The one :class:`Workload` table: what every kind of GPU workload shares; and :class:`SecretEnv`, its secret env.

Every workload of every kind is one row here (identity, team, flavor, kind, state, the reason pair,
attempt, cluster, parent, timestamps, billing marks), and a kind's model (a training run, an
inference endpoint) is its one-to-one detail table: Django's multi-table inheritance, with the
kind keeping its own primary key, so its API ids, its refs (``run:42``) and its cluster objects'
names (``run-42``) are its own numbering. The row says which kind and which number (``kind``,
``number``), so reads across kinds are plain queries on this table (docs/architecture.md "One
Workload table").

State moves only through conditional updates (``filter(pk=…, state=old).update(…)``) so a user's
action and a reconcile cycle racing each other cannot overwrite one another. On a kind's queryset
such an update locks the workload rows it matches first (:meth:`WorkloadQuerySet.update`): the
state lives on this table, and an update through the kind's table would test the condition on the
statement's snapshot only.

Billing is an **open segment** on the quota hold a workload holds (:class:`billing.models.QuotaHold`,
its :attr:`Workload.segment`): ``open_units`` GPU units have been running since ``billed_until``,
and everything before ``billed_until`` is in the ledger (the workload's total there is its
``billed_cost``). A cycle that sees the same units writes nothing; the segment is closed (its
ledger time written) when the units change, when the workload ends, when its GPUs turn idle or
busy (``open_idle``), and at hour boundaries — see :mod:`billing.segments`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from billing.ledger import cost_per_hour, open_segment_cost
from billing.models import INTERRUPTIONS, PreemptionEvent, QuotaHold, flavor_price
from billing.pricing import PriceBook, Quote
from cluster.backends.base import ClusterAddress
from teams.permissions import visible_to
from workloads import idle
from workloads.constants import SIM_GPU_MEMORY_ENV
from workloads.identity import WorkloadId
from workloads.telemetry.alert_rules import LABELS, AlertKind


def cost_to(billed_cost: Decimal, price: Decimal, open_units: int, billed_until: datetime | None,
            now: datetime) -> Decimal:
    """A workload's cost to ``now`` from its billing columns: the ledger's part plus the open segment.

    :meth:`Workload.cost_at` in columns, for lists that sort many workloads by cost without
    loading each whole row.
    """
    return billed_cost + open_segment_cost(price, open_units, billed_until, now)


class ReasonCode(models.TextChoices):
    """What a workload's ``reason`` is about, beside its words: what code branches on (never the words).

    The words (``reason``) are for people and may change with the figures in them ("6 of 8 in
    use"); the code names what they are about and stays put. Set wherever ``reason`` is set. One
    of three reason vocabularies, beside admission codes and messages (:mod:`workloads.constants`,
    docs/glossary.md "reason").
    """

    NONE = "", "Nothing to say"
    QUEUED = "queued", "Waiting in the team's queue (quota or budget)"
    WAITING_FOR_WORKER = "waiting_for_worker", "Admitted, waiting for a worker"
    SUBMITTED = "submitted", "Submitted to the cluster"
    CLUSTER = "cluster", "The cluster's own words"
    WAITING_FOR_CAPACITY = "waiting_for_capacity", "Waiting for cluster capacity"
    BURST_CAPPED = "burst_capped", "Burst capped (quota or budget)"
    ENDED_BY_USER = "ended_by_user", "Cancelled or deleted by a user"
    STOPPED_BY_BUDGET = "stopped_by_budget", "Stopped by the budget policy"
    NO_CLUSTER = "no_cluster", "No cluster can take it now (placement's reasons)"
    PROVISIONING = "provisioning", "Waiting for its elastic pool's new nodes"
    PROVISIONING_FAILED = "provisioning_failed", "Its nodes could not be provisioned; queued again after a backoff"
    CLUSTER_REJECTED = "cluster_rejected", "The cluster rejected it"
    CLUSTER_UNREACHABLE = "cluster_unreachable", "The cluster could not be reached"
    OBJECTS_VANISHED = "objects_vanished", "Its cluster objects disappeared"
    PREEMPTING = "preempting", "Being preempted: its pods are stopping"
    PREEMPTED = "preempted", "Preempted and queued again"
    CLUSTER_LOST = "cluster_lost", "Its cluster does not answer"
    PRUNING = "pruning", "Being pruned by its sweep: its pods save and stop"
    PRUNED = "pruned", "Pruned by its sweep: stopped early, its checkpoint kept"
    STOPPING = "stopping", "Being stopped with its sweep: its pods save and stop"
    RUNTIME_LIMIT = "runtime_limit", "Its runtime limit was used up over its attempts"


#: A stop through the checkpoint contract on its owner's behalf (:func:`workloads.lifecycle.stop`): while its pods
#: save and stop, the reason says which stop it is, and so where it ends (pruned, or the kind's ended state).
STOP_CODES = (ReasonCode.PRUNING, ReasonCode.STOPPING)

#: The portal's own words for the steps it takes: they hold while the cluster has nothing to say.
PORTAL_STEPS = (ReasonCode.WAITING_FOR_WORKER, ReasonCode.SUBMITTED)


#: What a workload reads of its holds (the reconcile cycle reads them for every workload it follows).
SEGMENT_FIELDS = ("ref", "created_at", "released_at", "started_at", "billed_until", "open_units", "open_idle",
                  "charged_price")


def attach_segments(workloads) -> None:
    """Load the money of each of ``workloads`` (:attr:`Workload.segment`) with one query for them all."""
    rows = [w for w in workloads if w.pk is not None]
    by_ref: dict[str, list[QuotaHold]] = {}
    if rows:
        for hold in (QuotaHold.objects.filter(ref__in=[w.ref for w in rows]).only(*SEGMENT_FIELDS)
                     .order_by("ref", "-created_at", "-pk")):
            by_ref.setdefault(hold.ref, []).append(hold)
    for workload in workloads:
        workload.segment_is(_money_hold(workload, by_ref.get(workload.ref, [])))


#: What :class:`HeldSegment` reads of a hold, in its fields' order.
HELD_FIELDS = ("pk", "ref", "started_at", "billed_until", "open_units", "open_idle", "charged_price")


@dataclass(slots=True)
class HeldSegment:
    """A held quota hold's money as the reconcile cycle reads it (:attr:`Workload.segment` there): what
    billing reads and moves (:data:`HELD_FIELDS`), without a model instance for each of 10,000 rows (their
    construction was a third of a steady cycle at that size; bench/reconcile_db.py)."""

    pk: int
    ref: str
    started_at: datetime | None
    billed_until: datetime | None
    open_units: int
    open_idle: bool
    charged_price: Decimal | None
    released_at: None = None  # held


def attach_held_segments(workloads) -> None:
    """:func:`attach_segments` for the reconcile cycle, cheaper: work holding quota shows the hold it holds
    (or none), read for all of them by team (no list of refs to send, nothing to sort) as
    :class:`HeldSegment` rows; the rest keep reading theirs when asked."""
    holding = [w for w in workloads if w.state in w.HOLDING_STATES]
    teams = {w.team_id for w in holding}
    held = ({row[1]: HeldSegment(*row) for row in QuotaHold.objects.held().filter(team_id__in=teams)
             .values_list(*HELD_FIELDS)} if teams else {})
    for workload in holding:
        workload.segment_is(held.get(workload.ref))


def _money_hold(workload, holds: list[QuotaHold]) -> QuotaHold | None:
    """Of ``workload``'s holds (newest first), the one whose money it shows (:attr:`Workload.segment`)."""
    for hold in holds:
        if hold.released_at is None:
            return hold
    if holds and workload.state not in workload.ACTIVE_STATES:
        return holds[0]  # ended: the rate it was charged last
    return None


class WorkloadQuerySet(models.QuerySet):
    """The sets of workloads by state, each named once (docs/glossary.md "active, queued, holding, unfinished").

    :meth:`with_segments` loads the rows' money (their quota holds) with one query more for all of them.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._with_segments = False

    def _clone(self):
        clone = super()._clone()
        clone._with_segments = self._with_segments
        return clone

    def _fetch_all(self) -> None:
        fetched = self._result_cache is None
        super()._fetch_all()
        if fetched and self._with_segments and self._result_cache and isinstance(self._result_cache[0], Workload):
            attach_segments(self._result_cache)

    def with_segments(self) -> WorkloadQuerySet:
        """Rows that come with their :attr:`Workload.segment` (cost, charged rate) read for all at once."""
        clone = self._chain()
        clone._with_segments = True
        return clone

    def unfinished(self) -> WorkloadQuerySet:
        """Not final (queued, holding quota, or on its way out): the names such work holds are taken."""
        return self.exclude(state__in=self.model.FINAL_STATES)

    def active(self) -> WorkloadQuerySet:
        """Queued or holding quota: work that waits for its units or has them (on its way out is not active)."""
        return self.filter(state__in=self.model.ACTIVE_STATES)

    def holding_quota(self) -> WorkloadQuerySet:
        """Admitted and not ended: what the team's holds stand for."""
        return self.filter(state__in=self.model.HOLDING_STATES)

    def for_user(self, user) -> WorkloadQuerySet:
        """Workloads of the user's teams (the tenancy boundary)."""
        return visible_to(self, user)

    def for_list(self) -> WorkloadQuerySet:
        """What list pages and the list API need, in a constant number of queries."""
        return self.select_related("team", "flavor", "created_by", "cluster").with_segments().order_by("-created_at", "-pk")

    def bulk_create(self, objs, batch_size: int | None = None, **options) -> list:
        """A kind's rows in bulk (the demo's history, the benchmarks' thousands): their rows of the one table
        first, in one statement a batch, then the kind's, linked; then each row's number. Django refuses a
        child model's bulk insert; this is the same three steps its ``save()`` takes, a batch at a time."""
        if self.model is Workload or options:
            return super().bulk_create(objs, batch_size=batch_size, **options)
        objs = list(objs)
        shared = [f for f in Workload._meta.concrete_fields if not f.primary_key and f.name != "kind"]
        with transaction.atomic(savepoint=False):
            rows = [Workload(**{f.attname: getattr(obj, f.attname) for f in shared}, kind=self.model.KIND_PREFIX)
                    for obj in objs]
            for row in rows:  # what auto_now_add would have set on save()
                row.created_at = row.created_at or timezone.now()
            Workload.objects.bulk_create(rows, batch_size=batch_size)
            for obj, row in zip(objs, rows, strict=True):
                obj.uid = obj.workload_id = row.uid
                obj.kind = row.kind
            own = [f for f in self.model._meta.local_concrete_fields if not f.primary_key]
            # The kind's table alone: Django's own bulk_create stops at a child model before it begins.
            returned = self._batched_insert(objs, own, batch_size)
            for obj, values in zip(objs, returned, strict=True):
                obj.pk = values[0]
                obj._state.adding, obj._state.db = False, self.db
            for obj, row in zip(objs, rows, strict=True):
                row.number = obj.number = obj.pk
            Workload.objects.bulk_update(rows, ["number"], batch_size=batch_size)
        return objs

    def update(self, **changes) -> int:
        """On a kind's rows: lock the matching workload rows (``SELECT … FOR UPDATE OF`` this table,
        which tests the filter again on a row another transaction just moved), then update the shared
        columns here and the kind's in its table, by those rows. Django's own update of a child model
        would select the rows first without a lock and then update them by id: two racing conditional
        moves would both win. The one table itself updates as any model does."""
        if self.model is Workload:
            return super().update(**changes)
        shared = {name for name in changes if name in SHARED_FIELD_NAMES}
        with transaction.atomic(savepoint=False):
            rows = list(self.order_by().select_for_update(of=("workload",)).values_list("pk", "workload_id"))
            if not rows:
                return 0
            if shared:
                Workload.objects.filter(uid__in=[uid for _pk, uid in rows]).update(
                    **{name: value for name, value in changes.items() if name in shared})
            own = {name: value for name, value in changes.items() if name not in shared}
            if own:
                models.QuerySet(self.model).filter(pk__in=[pk for pk, _uid in rows]).update(**own)
        return len(rows)


class Workload(models.Model):
    """The row every workload has, whatever its kind; a kind's model is its detail table (module docstring)."""

    #: The kind's identity prefix ("run", "ep"): see :mod:`workloads.identity`.
    KIND_PREFIX: str = ""
    #: The kind's states (a ``TextChoices``: its words and their labels) and the one a new workload starts in.
    STATES: type[models.TextChoices] | None = None
    INITIAL_STATE: str = ""
    #: States the workload never leaves / in which it has a quota hold / in which it is active
    #: (queued or holding quota). The one definition of each word: docs/glossary.md.
    FINAL_STATES: tuple[str, ...] = ()
    HOLDING_STATES: tuple[str, ...] = ()
    ACTIVE_STATES: tuple[str, ...] = ()

    #: The row's own key; a workload is named by its kind and number (``kind``, ``number``: its ref).
    uid = models.BigAutoField(primary_key=True)
    #: Its kind's identity prefix ("run", "ep") and its number there (the kind's primary key).
    kind = models.CharField(max_length=16, editable=False)
    number = models.PositiveBigIntegerField(null=True, editable=False)
    #: The workload this one is part of (a sweep's trial is its sweep's child); None for most.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")

    team = models.ForeignKey("portal.Team", on_delete=models.PROTECT, related_name="workloads")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="workloads")
    name = models.CharField(max_length=40)
    flavor = models.ForeignKey("fleet.GpuFlavor", on_delete=models.PROTECT, related_name="workloads")
    spot = models.BooleanField(default=False)

    #: A word of its kind's lifecycle (each kind's states: docs/glossary.md).
    state = models.CharField(max_length=16, db_index=True)
    reason = models.CharField(max_length=500, blank=True)
    reason_code = models.CharField(max_length=32, choices=ReasonCode.choices, blank=True, default=ReasonCode.NONE)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    # Applying: attempts and the start of the latest (a worker may die mid-apply), and when
    # an apply last succeeded (None: the objects were never applied, so the reconciler
    # re-drives rather than calling them vanished).
    apply_attempts = models.PositiveSmallIntegerField(default=0)
    apply_started_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)

    #: What the ledger holds of it (module docstring): the total of its closed intervals, ten
    #: decimals (billing.ledger.LEDGER_PRECISION). Its open segment is on its hold (:attr:`segment`).
    billed_cost = models.DecimalField(max_digits=20, decimal_places=10, default=Decimal(0))
    # Idle GPUs (workloads.idle): since when the utilization has stayed under the threshold without
    # a break (None while busy or unmeasured); whether the open segment is idle time is its hold's.
    idle_since = models.DateTimeField(null=True, blank=True)

    # Preemption (docs/design.md "Sharing, preemption, clusters"): how often its borrowed units were taken back, when last, and —
    # while its pods are being stopped for that — since when (None otherwise). A workload
    # being preempted keeps its hold until its pods are gone (workloads.cycle.preemption).
    preemptions = models.PositiveSmallIntegerField(default=0, db_default=0)
    last_preempted_at = models.DateTimeField(null=True, blank=True)
    preempting_since = models.DateTimeField(null=True, blank=True)
    #: Which attempt this is: 1 at submission, one more each time it is queued again after a
    #: preemption (:func:`workloads.lifecycle.requeue`); a run's pods read it as SLIPWAY_ATTEMPT.
    attempt = models.PositiveIntegerField(default=1, db_default=1)
    #: When the current attempt's pods started (its first container), as the cycle first saw it;
    #: cleared when it is queued again. ``started_at`` stays the first attempt's (billing, "Ran for").
    attempt_started_at = models.DateTimeField(null=True, blank=True)
    #: How long its earlier attempts ran, in whole seconds (each as :func:`ran_between` counts it), added when it is
    #: queued again (:func:`workloads.lifecycle.requeue`). A runtime limit counts every attempt, as Kueue's
    #: ``maximumExecutionTimeSeconds`` does: each attempt gets what is left (docs/glossary.md "runtime limit").
    earlier_run_seconds = models.PositiveIntegerField(default=0, db_default=0)
    #: Where it runs (docs/design.md "Sharing, preemption, clusters"): set when it is placed, before its first apply, and
    #: cleared only when it is withdrawn before it started or queued again. Null: not placed yet.
    cluster = models.ForeignKey("fleet.Cluster", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    placement_reason = models.CharField(max_length=300, blank=True)
    placed_at = models.DateTimeField(null=True, blank=True)
    #: Elastic pools (docs/pools.md): when its current ProvisioningRequest was created (None: none open), and how
    #: many of its provisionings failed in a row (its backoff and its last try read it; reset once one succeeds).
    provisioning_since = models.DateTimeField(null=True, blank=True)
    provisioning_failures = models.PositiveSmallIntegerField(default=0, db_default=0)
    #: Labels a cluster must carry to be chosen (docs/api.md "Clusters"); empty: any cluster.
    cluster_selector = models.JSONField(default=dict, blank=True)
    #: The id of its team's reservation it is for (docs/reservations.md "Open or targeted"): admitted into that
    #: reservation's windows first, it waits for them rather than starting on the quota; null: none named. An id,
    #: not a key: reservations are an app above the workloads (their windows, billing's, carry it as their ref).
    for_reservation = models.PositiveIntegerField(null=True, blank=True)
    #: The GPU memory each pod needs in GB, when the user says (optional): the flavor advice warns when a unit
    #: has less (quotas.policy.warnings), and the sandbox simulates that much use (SLIPWAY_SIM_GPU_MEMORY_GB).
    gpu_memory_gb = models.FloatField(null=True, blank=True)

    objects = WorkloadQuerySet.as_manager()

    #: Not a column: the sorted secret env names when this instance recorded them
    #: (:func:`workloads.secrets.store`); None when they are to be read (:func:`workloads.secrets.names`).
    stored_secret_names: tuple[str, ...] | None = None
    #: Likewise the digest of its secret values (:func:`workloads.secrets.reference`).
    stored_secret_digest: str | None = None

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [models.UniqueConstraint(fields=["kind", "number"], name="uniq_workload_kind_number")]
        indexes = [models.Index(fields=["team", "state"], name="workload_team_state_idx"),
                   models.Index(fields=["kind", "state"], name="workload_kind_state_idx")]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not self.state and self.INITIAL_STATE:
            self.state = self.INITIAL_STATE

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.name} ({self.ref})"

    def save(self, *args, **kwargs) -> None:
        """A new workload of a kind: its row says which kind, then which number once the kind's row has one."""
        if self.KIND_PREFIX:
            self.kind = self.KIND_PREFIX
        if self._state.adding and self.parent_id is not None and not Workload.objects.filter(
                uid=self.parent_id, team_id=self.team_id).exists():
            raise ValueError(f"workload {self.parent_id} is another team's: a workload's parent is of its own team")
        super().save(*args, **kwargs)
        if self.KIND_PREFIX and self.number != self.pk:
            Workload.objects.filter(uid=self.uid).update(number=self.pk)
            self.number = self.pk

    @classmethod
    def state_choices(cls) -> list[tuple[str, str]]:
        """The kind's states as ``(value, label)`` pairs (none for a row read across kinds)."""
        return list(cls.STATES.choices) if cls.STATES is not None else []

    def get_state_display(self) -> str:
        """Its state's label ("Running"), as a field with choices would give it."""
        return dict(self.state_choices()).get(self.state, self.state)

    # -- identity -------------------------------------------------------------------------------
    @property
    def identity(self) -> WorkloadId:
        if self.KIND_PREFIX:
            return WorkloadId(self.KIND_PREFIX, self.pk)
        return WorkloadId(self.kind, self.number)  # a row of the one table, read across kinds

    @property
    def ref(self) -> str:
        """The quota and ledger reference, e.g. ``run:42``."""
        return self.identity.ref

    @property
    def object_name(self) -> str:
        """The cluster objects' name and workload label, e.g. ``run-42``."""
        return self.identity.object_name

    @property
    def namespace(self) -> str:
        return self.team.namespace

    @property
    def address(self) -> ClusterAddress:
        """Where it lives on the cluster: its namespace and object name (``ref`` is its ledger name)."""
        return ClusterAddress(self.namespace, self.object_name)

    @property
    def is_final(self) -> bool:
        return self.state in self.FINAL_STATES

    @property
    def attempt_started(self) -> datetime | None:
        """When its current attempt's pods started; None before they did (a queued-again workload
        never says "started" about its earlier attempt). Rows from before ``attempt_started_at``
        existed: ``started_at`` when it is on its first attempt."""
        return attempt_start(self.attempt_started_at, self.started_at, self.attempt)

    @property
    def ran_in_all(self) -> timedelta | None:
        """How long its attempts ran in all — what its earlier ones ran (``earlier_run_seconds``) and the current
        one from its pods' start (:func:`ran_between`) to its end, or to now while it runs — not the waits between
        them; None when none of its attempts started. The one rule of a workload's running time: the run page's
        "Ran for", the start estimates' samples of how long a job runs."""
        return ran_in_all(self.earlier_run_seconds, self.attempt_started,
                          self.finished_at if self.is_final else timezone.now())

    def pod_env(self) -> dict[str, str]:
        """The env its pods get: the user's, with the sandbox's ``SLIPWAY_SIM_GPU_MEMORY_GB`` set from
        :attr:`gpu_memory_gb` when given and not set by the user (whose value wins), so simulated pods use as
        much GPU memory as the work says it needs. A real cluster's pods ignore the variable."""
        env = dict(self.env)
        if self.gpu_memory_gb is not None and SIM_GPU_MEMORY_ENV not in env:
            env[SIM_GPU_MEMORY_ENV] = f"{self.gpu_memory_gb:g}"
        return env

    # -- money ----------------------------------------------------------------------------------
    @property
    def segment(self) -> QuotaHold | HeldSegment | None:
        """The quota hold whose money this workload shows: the one it holds, or — ended — the last it
        held (the rate it was charged last); None while it holds none (queued, or never admitted).
        Its open segment is ``open_units`` since ``billed_until`` at ``charged_price``
        (:mod:`billing.segments` moves it). Read once per instance; lists read theirs together
        (:meth:`WorkloadQuerySet.with_segments`)."""
        if "_segment" not in self.__dict__:
            attach_segments([self])
        return self.__dict__["_segment"]

    def refresh_from_db(self, *args, **kwargs) -> None:
        super().refresh_from_db(*args, **kwargs)
        self.forget_segment()  # its hold may have moved too

    def segment_is(self, hold: QuotaHold | HeldSegment | None) -> None:
        """Set :attr:`segment` (read or just written by the caller)."""
        self.__dict__["_segment"] = hold

    def forget_segment(self) -> None:
        """Read :attr:`segment` anew on its next use (after another writer moved it)."""
        self.__dict__.pop("_segment", None)

    # The open segment's figures, as its hold has them (none: nothing open, no rate charged).
    @property
    def billed_until(self) -> datetime | None:
        return self.segment.billed_until if self.segment is not None else None

    @property
    def open_units(self) -> int:
        return self.segment.open_units if self.segment is not None else 0

    @property
    def open_idle(self) -> bool:
        return self.segment.open_idle if self.segment is not None else False

    @property
    def charged_price(self) -> Decimal | None:
        """The charged rate (:attr:`billing.models.QuotaHold.charged_price`): once billing began, the price
        the workload shows (:meth:`price_quote`); a price change by staff reaches only segments that open
        after it (docs/money.md "What work costs"). None before billing began, and while queued again."""
        return self.segment.charged_price if self.segment is not None else None

    @property
    def placement_shape(self) -> tuple[int, int]:
        """``(units, units per worker)`` as placement sees the work (its guaranteed part): a kind sets it."""
        raise NotImplementedError

    @property
    def training_framework(self) -> str:
        """The framework of its distributed training, which only a cluster whose training API takes that framework
        may run (:func:`cluster.training.takes`); "" for work that is none: placement, admission's wait and the
        price quote ask with it, as with its shape. A kind whose work is says so; no other work is."""
        return ""

    def price_quote(self, book: PriceBook | None = None) -> Quote:
        """The price this workload shows — the one function its page, the lists, the API (and so the
        CLI) and e-mails ask (:mod:`billing.pricing`): once billing began, its charged rate
        (:attr:`charged_price`, frozen when its segment opened, never re-read from today's prices);
        placed and not billed yet, its cluster's price (what billing will charge); not placed, the
        price on the cluster placement would choose now, with the range.
        ``book``: a :class:`~billing.pricing.PriceBook` shared by the rows of a list."""
        if self.charged_price is not None and self.cluster_id is None:  # billed, its placement cleared: no cluster to name
            return Quote(self.charged_price, placed=True)
        found = self._table_quote(book)
        return found if self.charged_price is None else found.charged(self.charged_price)

    def _table_quote(self, book: PriceBook | None = None) -> Quote:
        """Today's quote from the price table (:meth:`billing.pricing.PriceBook.quote`), kept for the row."""
        cached = getattr(self, "_price_quote", None)
        if cached is not None and cached[0] == self.cluster_id:
            return cached[1]  # a page or a list row asks several figures of one quote
        units, per_node = self.placement_shape
        found = (book or PriceBook()).quote(self.flavor, self.spot, cluster_id=self.cluster_id, units=units,
                                            units_per_node=per_node, selector=self.cluster_selector,
                                            training_framework=self.training_framework)
        self._price_quote = (self.cluster_id, found)
        return found

    @property
    def price_words(self) -> str:
        """"3.60 USD/h on east (3.60–4.60)": :meth:`price_quote` for its page."""
        return self.price_quote().words()

    def unit_price(self) -> Decimal:
        """What one of its unit-hours costs (:meth:`price_quote`'s price); charged or placed, read
        without a quote's reads."""
        if self.charged_price is not None:
            return self.charged_price
        return self.table_price()

    def table_price(self) -> Decimal:
        """Today's price of its unit-hour in the price table (its cluster's, placed; else the quote's):
        what a billing segment opening now is charged (:func:`billing.segments.plan_billing`)."""
        cached = getattr(self, "_price_quote", None)
        if cached is not None and cached[0] == self.cluster_id:
            return cached[1].price  # a list quoted its rows (quote_rows)
        if self.cluster_id is not None:
            return flavor_price(self.flavor, self.spot, self.cluster_id)
        return self._table_quote().price

    def cost_at(self, now: datetime) -> Decimal:
        """Cost to ``now``: the ledger's part plus the open segment (exact to the second)."""
        if not self.open_units:  # nothing runs: no open segment, and no price to read for it
            return self.billed_cost
        return cost_to(self.billed_cost, self.unit_price(), self.open_units, self.billed_until, now)

    @property
    def cost_to_date(self) -> Decimal:
        return self.cost_at(timezone.now())

    @property
    def idle_flag_since(self) -> datetime | None:
        """Since when the GPUs have been idle, once for the platform's idle window (:mod:`workloads.idle`)."""
        return idle.flagged_since(self, timezone.now())

    def cost_per_hour_at(self, units: int) -> Decimal:
        """What ``units`` of this workload's flavor cost per hour (spot or on-demand)."""
        return cost_per_hour(self.unit_price(), units)


#: The one table's columns, by field name and by column attribute (``cluster`` and ``cluster_id``):
#: what a kind's update writes here rather than in its own table (:meth:`WorkloadQuerySet.update`).
SHARED_FIELD_NAMES = frozenset({f.name for f in Workload._meta.concrete_fields}
                               | {f.attname for f in Workload._meta.concrete_fields})


def detail_link() -> models.OneToOneField:
    """A kind's link to its row in the one table: each kind's model declares ``workload = detail_link()``
    beside its own ``id`` (``models.AutoField(primary_key=True)``), the number its refs carry."""
    return models.OneToOneField(Workload, parent_link=True, on_delete=models.CASCADE)


def quote_rows(workloads) -> None:
    """Quote every row of a list from one :class:`~billing.pricing.PriceBook` (its reads once for
    the page, not per row): each row keeps its quote for the figures it shows."""
    book = PriceBook()
    for workload in workloads:
        workload.price_quote(book)


class SecretEnv(models.Model):
    """The secret env of one workload: the values its Kubernetes Secret ``<object name>-env`` holds.

    Kept apart from the workload's submitted fields, which pages, the API and the manifest view
    show: the pod spec only names the variables (``valueFrom.secretKeyRef``), and only the
    apply task reads the values (to create the Secret). Not registered in the admin.

    At rest the values are one Fernet token (``sealed``, :mod:`workloads.crypto`) under the keys
    of ``SLIPWAY_SECRET_KEYS``, which live in the environment, not the database: the database and
    its backups hold no plain value. One row per workload, written in the transaction that
    records the workload, so a rejected submission leaves neither; an endpoint's PATCH replaces it.
    """

    #: The workload's ledger reference (``run:42``): one identity, as quota holds use.
    ref = models.CharField(max_length=40, unique=True)
    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="+")
    #: Sorted variable names: what masking needs, readable without loading the values.
    names = models.JSONField(default=list)
    #: The values' JSON as a Fernet token (:func:`workloads.crypto.seal`); emptied when the
    #: workload ends (:func:`workloads.lifecycle.release_holdings`).
    sealed = models.TextField(blank=True, default="")
    #: :func:`workloads.crypto.digest` of the values as written: an endpoint's pod template carries
    #: it, so replacing the values rolls the Deployment. Empty for rows from before it existed.
    digest = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "secret env"
        verbose_name_plural = "secret env"

    def __str__(self) -> str:
        return f"secret env of {self.ref} ({', '.join(self.names)})"  # names only, never values


#: How an earlier attempt ended, in words, by its end code (timeline, Attempts card, attempt picker);
#: a preemption whose cause was the provider's (a spot node reclaimed) is an interruption.
ATTEMPT_ENDS = {ReasonCode.PREEMPTED: "preempted", ReasonCode.CLUSTER_LOST: "cluster lost"}
INTERRUPTED = "interrupted"


def attempt_start(attempt_started_at: datetime | None, started_at: datetime | None, attempt: int) -> datetime | None:
    """When a workload's current attempt's pods started (:attr:`Workload.attempt_started`), from its columns: for
    the queries that read them as values."""
    if attempt_started_at is not None:
        return attempt_started_at
    return started_at if attempt == 1 else None


def ran_in_all(earlier_seconds: int, attempt_started: datetime | None, end: datetime | None) -> timedelta | None:
    """How long a workload's attempts ran in all (:attr:`Workload.ran_in_all`), from its columns: for the queries
    that read them as values."""
    current = ran_between(attempt_started, end)
    if current is None and not earlier_seconds:
        return None
    return timedelta(seconds=earlier_seconds) + (current or timedelta(0))


def ran_between(started: datetime | None, ended: datetime | None) -> timedelta | None:
    """How long an attempt ran: from its pods' start to its end, the grace included (it was billed); None when it
    never started. The one rule of an attempt's time: pages add it up, and a runtime limit counts it."""
    if started is None or ended is None:
        return None
    return max(ended - started, timedelta(0))


class Attempt(models.Model):
    """One earlier attempt of a workload that was queued again: where it ran, how it ended, its logs.

    A workload's current attempt is described by its own row (``cluster``, ``placement_reason``,
    ``attempt_started``…); when it is queued again (a preemption, a spot interruption, a lost
    cluster: :func:`workloads.lifecycle.requeue`), what the current attempt was is written here
    and the workload's columns start afresh for the next one. Its pages show each attempt with
    its own placement and logs (:mod:`workloads.attempts`).

    **Logs are saved, not re-read.** A requeued attempt's pods are deleted, and no cluster serves
    the log of a deleted pod (the kubelet removes it with the pod; the sandbox does the same), so
    Slipway keeps the tail of each of its pods' logs here: read when the preemption is decided,
    just before the delete, and again every cycle while its pods stop within their grace (their
    last words — "saving checkpoint" — come then). What a pod printed after the last read before
    it was gone is not kept. The row may therefore exist, logs only, before its attempt ends
    (``ended_at`` None); a workload that ends on its own during the grace keeps that row.
    """

    #: The workload's ledger reference (``run:42``), as holds and the preemption log name it.
    ref = models.CharField(max_length=40, db_index=True)
    number = models.PositiveIntegerField()
    cluster = models.ForeignKey("fleet.Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    placement_reason = models.CharField(max_length=300, blank=True)
    placed_at = models.DateTimeField(null=True, blank=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    #: When its pods started (None: they never did).
    started_at = models.DateTimeField(null=True, blank=True)
    #: When it was told to stop (the preemption's notice; None: it was not, e.g. its cluster was lost).
    stopped_at = models.DateTimeField(null=True, blank=True)
    #: When it was queued again (its objects gone); None while its logs are saved before that.
    ended_at = models.DateTimeField(null=True, blank=True)
    #: Why it ended: ``end_reason_code`` for code, ``end_reason`` for people (the pair a workload keeps as
    #: ``reason_code`` and ``reason``).
    end_reason_code = models.CharField(max_length=32, choices=ReasonCode.choices, blank=True, default=ReasonCode.NONE)
    #: The cause of the preemption that ended it (its log row's), "" when none did (a lost cluster).
    cause = models.CharField(max_length=16, choices=PreemptionEvent.Cause.choices, blank=True, default="")
    end_reason = models.CharField(max_length=500, blank=True)
    #: The last checkpoint it reported (``{"at", "step", "path"}``, ``at`` in ISO 8601), if its kind reports them.
    checkpoint = models.JSONField(null=True, blank=True, default=None)
    #: ``[{"pod", "label", "previous", "lines"}]``: the tail of each of its pods' logs, in picker order.
    logs = models.JSONField(default=list, blank=True)
    logs_saved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["ref", "number"]
        constraints = [models.UniqueConstraint(fields=["ref", "number"], name="uniq_attempt_number")]

    def __str__(self) -> str:
        return f"{self.ref} attempt {self.number}"

    @property
    def ended_words(self) -> str:
        """"preempted", "interrupted" (the cluster took its node: a spot reclaim, a drain), "cluster lost"."""
        if self.cause in INTERRUPTIONS:
            return INTERRUPTED
        return ATTEMPT_ENDS.get(self.end_reason_code, "queued again")

    @property
    def ran_for(self) -> timedelta | None:
        """How long it ran (:func:`ran_between`); None when it never started."""
        return ran_between(self.started_at, self.ended_at)

    @property
    def last_checkpoint(self) -> dict | None:
        """``{"at", "step", "path"}`` with ``at`` a datetime, or None."""
        if not self.checkpoint:
            return None
        at = self.checkpoint.get("at")
        return {**self.checkpoint, "at": datetime.fromisoformat(at) if at else None}


class GpuTelemetry(models.Model):
    """A stretch of one workload's GPU telemetry: every GPU's DCGM figures, one value per slot.

    Two resolutions (docs/metrics.md "GPU telemetry"): a **minute** row (``step`` 60, one slot)
    per workload and minute, written by the reconcile cycle (:func:`workloads.telemetry.readings.record`,
    the minute's last reading); and, once its minutes are older than
    ``SLIPWAY_TELEMETRY_RAW_MINUTES``, a **day** row (``step`` ``SLIPWAY_TELEMETRY_STEP_MINUTES``,
    a day's slots) they are folded into by a beat task (:func:`workloads.telemetry.readings.compact`). A
    week-long run on 8 GPUs is then about 68 rows, not the 80,640 of a row per GPU and minute.

    ``values`` is little-endian float32, shaped ``(series, GPU, slot)`` in
    :data:`workloads.telemetry.readings.SERIES` and ``gpus`` order, NaN where nothing was reported. Rows
    carry their team like the ledger's: reads are scoped by it.
    """

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="+")
    #: The workload's ledger reference (``run:42``).
    ref = models.CharField(max_length=40)
    #: The first slot's start; a slot covers ``step`` seconds.
    start = models.DateTimeField()
    step = models.PositiveIntegerField()
    slots = models.PositiveIntegerField()
    #: The exporter's GPU ids, in the order of ``values``' second axis.
    gpus = models.JSONField(default=list)
    values = models.BinaryField()

    class Meta:
        verbose_name = "GPU telemetry"
        verbose_name_plural = "GPU telemetry"
        constraints = [models.UniqueConstraint(fields=["ref", "step", "start"], name="uniq_gpu_telemetry_slot")]
        indexes = [models.Index(fields=["team", "ref", "start"], name="gpu_telemetry_team_ref")]

    def __str__(self) -> str:
        return f"GPU telemetry of {self.ref} from {self.start:%Y-%m-%d %H:%M} ({self.slots} × {self.step} s)"
class AlertEpisode(models.Model):
    """One episode of an alert on a workload's GPUs (:mod:`workloads.telemetry.alert_rules`): pending, open, closed.

    Moves are conditional updates on ``state`` (and ``clearing_since``), so two cycles, or a cycle
    replayed, move an episode once; the constraint keeps one active (pending or open) episode per
    workload and alert kind, so a second pending row of a racing cycle is not written. The one
    message of an episode is recorded in the transaction of its move to open. Closed episodes
    stay, the workload's alert history.
    """

    class State(models.TextChoices):
        PENDING = "pending", "Pending"  #: the condition holds, not yet for the rule's duration
        OPEN = "open", "Open"  #: the alert was sent; open until the condition stays clear long enough
        CLOSED = "closed", "Closed"

    #: The workload's ledger reference (``run:42``).
    ref = models.CharField(max_length=40)
    alert_kind = models.CharField(max_length=16, choices=[(k.value, LABELS[k]) for k in AlertKind])
    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="+")
    #: Where it runs: the cycle of this cluster follows the episode.
    cluster = models.ForeignKey("fleet.Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    #: When the condition began to hold (the pending start; the alert says "since").
    since = models.DateTimeField()
    opened_at = models.DateTimeField(null=True, blank=True)
    #: While open: since when the condition has been clear (None while it holds).
    clearing_since = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    #: What the alert said, as it opened: the figure, the rule it passed (the team's, tightened or
    #: not), and for idle GPUs what they cost per hour (the one price rule) and whether they were
    #: the minimum an endpoint keeps ready.
    value = models.FloatField(null=True, blank=True)
    threshold = models.FloatField(null=True, blank=True)
    after_minutes = models.PositiveIntegerField(null=True, blank=True)
    cost_per_hour = models.DecimalField(max_digits=14, decimal_places=4, null=True, blank=True)
    at_minimum = models.BooleanField(default=False)
    #: The GPU the figure is of (the fullest, the hottest), as the exporter names it; "" when not known.
    gpu = models.CharField(max_length=120, blank=True)

    class Meta:
        ordering = ["-since", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["ref", "alert_kind"], condition=~Q(state="closed"),
                                    name="uniq_active_alert_episode"),
        ]
        indexes = [models.Index(fields=["cluster", "state"], name="alert_episode_active_idx"),
                   models.Index(fields=["ref", "-since"], name="alert_episode_ref_idx")]

    def __str__(self) -> str:
        return f"{self.alert_kind} of {self.ref} ({self.state})"

    @property
    def label(self) -> str:
        return LABELS[AlertKind(self.alert_kind)]


class TeamAlertSettings(models.Model):
    """A team's own alert rules, tighter than the platform's (``SLIPWAY_ALERT_*``); None: the platform's.

    Set by the team's admins (Team page, ``/api/v1/teams/<slug>/alerts/``) through
    :func:`workloads.telemetry.alert_settings.set_team_alert_settings`, which refuses a looser value. The
    rule that applies is the tighter of the two at every cycle (:func:`workloads.telemetry.alert_settings.rules_for`),
    so a default staff tighten later still holds for a team that set its own.
    """

    team = models.OneToOneField("portal.Team", on_delete=models.CASCADE, related_name="alert_settings")
    idle_util_pct = models.FloatField(null=True, blank=True)
    idle_minutes = models.PositiveIntegerField(null=True, blank=True)
    memory_pct = models.FloatField(null=True, blank=True)
    memory_minutes = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "team alert settings"
        verbose_name_plural = "team alert settings"

    def __str__(self) -> str:
        return f"alert settings of team {self.team_id}"
