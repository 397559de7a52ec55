"""The sandbox clusters' state: objects, pods, events, synthetic load and the clocks.

Everything the "API server" stores lives here so that web, worker and beat share the
clusters and they survive restarts. Every row belongs to one cluster of the inventory
(:func:`sandbox.inventory.clusters`), named in its ``cluster`` column: the clusters are
independent (two may hold the same namespace and Job), and each query of a
:class:`~sandbox.backend.SandboxBackend` filters on its own, led by that column in the indexes.

Rows are kept small: a top-level object keeps its manifest (read by ``observe()`` only), a
compact ``plan`` the tick reads, and its ``status``; a pod keeps only its lifecycle facts — its
full Kubernetes shape is rebuilt from the owner's template when observed.
"""

from __future__ import annotations

from django.db import models

from sandbox.inventory import DEFAULT_CLUSTER


def cluster_field() -> models.CharField:
    """The column that says which simulated cluster a row belongs to (a DNS-1123 label)."""
    return models.CharField(max_length=63, default=DEFAULT_CLUSTER)


class SimObject(models.Model):
    """One top-level object as applied (Job, PyTorchJob, Deployment, Service, Namespace …)."""

    cluster = cluster_field()
    #: Its Kubernetes ``kind`` (``Job``, ``Deployment``…): a resource kind, not a workload kind.
    resource_kind = models.CharField(max_length=40)
    api_version = models.CharField(max_length=80)
    #: Namespaced objects: their namespace; a Namespace: its own name (so it groups with its team).
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    workload = models.CharField(max_length=63, blank=True, db_index=True)
    team = models.CharField(max_length=63, blank=True)
    uid = models.CharField(max_length=36)
    manifest = models.JSONField()
    plan = models.JSONField(default=dict)
    status = models.JSONField(default=dict)
    #: Controller bookkeeping that is not Kubernetes status (attempt counters, last messages).
    memo = models.JSONField(default=dict)
    #: Replica count the autoscaler set (Deployments).
    replicas = models.IntegerField(default=0)
    #: True once a Job/PyTorchJob reached Complete/Failed: the tick skips it from then on.
    done = models.BooleanField(default=False)
    generation = models.IntegerField(default=1)
    resource_version = models.BigIntegerField(default=1)
    created_at = models.DateTimeField()
    #: A graceful delete (``delete(grace_seconds>0)``) under way: the object and its pods stay,
    #: terminating, until their pods have exited or this deadline passes (``deletionTimestamp``).
    #: Columns of their own, not memo: the tick writes memo back and would undo a concurrent delete.
    delete_at = models.DateTimeField(null=True, blank=True, db_index=True)
    delete_grace = models.IntegerField(null=True, blank=True)  #: its ``deletionGracePeriodSeconds``

    class Meta:
        verbose_name = "simulated object"
        verbose_name_plural = "simulated objects"
        constraints = [models.UniqueConstraint(fields=["cluster", "resource_kind", "namespace", "name"],
                                               name="sandbox_object_unique")]
        indexes = [models.Index(fields=["cluster", "namespace", "workload"]),
                   models.Index(fields=["cluster", "done", "resource_kind"], name="sandbox_sim_cluster_c882f2_idx")]

    def __str__(self) -> str:
        return f"{self.resource_kind}/{self.namespace}/{self.name}"


class SimPod(models.Model):
    """One pod created by a Job, PyTorchJob or Deployment controller (in its owner's cluster)."""

    cluster = cluster_field()
    owner = models.ForeignKey(SimObject, on_delete=models.CASCADE, related_name="pods")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    workload = models.CharField(max_length=63, blank=True)
    #: Index into the owner's ``plan["pods"]`` (Master/Worker of a PyTorchJob) and replica index
    #: (a Job's pods: the attempt, 0-based).
    role = models.IntegerField(default=0)
    index = models.IntegerField(default=0)
    template_hash = models.CharField(max_length=16, blank=True)
    node = models.CharField(max_length=100, blank=True)
    phase = models.CharField(max_length=12, default="Pending")  # Pending/Running/Succeeded/Failed
    #: Lifecycle stage reached (events are emitted once per stage), see sandbox.world.
    stage = models.IntegerField(default=0)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField()
    scheduled_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    #: When a server's pod last became ready (its Ready condition's transition): its readiness probe's first
    #: success after its model loaded. None while it is not ready (and for pods of other kinds).
    ready_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=40, blank=True)  # OOMKilled, Error, Completed, DeadlineExceeded
    exit_code = models.IntegerField(null=True, blank=True)
    #: The FailedScheduling message while unschedulable; once bound, what the pod's end says beyond
    #: its reason (a shared GPU's OOM, the device plugin refusing it: sandbox.sharing).
    message = models.TextField(blank=True)
    #: Which physical GPU of its node a pod of a shared resource got (0-based): the device plugin
    #: hands out one replica of one GPU (sandbox.sharing). None: not a shared GPU's pod.
    gpu = models.SmallIntegerField(null=True, blank=True)
    #: Seconds of its run done by ``progress_at``: a time-sliced GPU slows a pod down while others
    #: are busy on it. ``progress_at`` None: it has run at full speed since it started.
    progress = models.FloatField(default=0.0)
    progress_at = models.DateTimeField(null=True, blank=True)
    #: When its pace changed there: ``[[unix seconds, work done, rate from then], …]`` (sandbox.sharing.Pace),
    #: so its log's steps keep their times. Empty: it never shared a GPU with a busy pod.
    pace = models.JSONField(default=list, blank=True)
    #: Annotations put on the pod after its creation (``annotate_pods``: the preemption notice).
    annotations = models.JSONField(default=dict, blank=True)
    #: When the first annotation ``slipway.dev/notice`` reached the pod (its downward-API file changed).
    notice_at = models.DateTimeField(null=True, blank=True)
    #: The reason of its ``DisruptionTarget`` condition (``TerminationByKubelet``: its node was reclaimed).
    disruption = models.CharField(max_length=40, blank=True)

    class Meta:
        verbose_name = "simulated pod"
        verbose_name_plural = "simulated pods"
        constraints = [models.UniqueConstraint(fields=["cluster", "namespace", "name"], name="sandbox_pod_unique")]
        indexes = [models.Index(fields=["cluster", "active"]),
                   models.Index(fields=["cluster", "namespace", "workload"])]

    def __str__(self) -> str:
        return f"Pod/{self.namespace}/{self.name}"


class SimEvent(models.Model):
    """A Kubernetes event about a workload's object or pod."""

    cluster = cluster_field()
    namespace = models.CharField(max_length=63)
    workload = models.CharField(max_length=63, blank=True)
    object = models.CharField(max_length=300)  # "Pod/run-42-abcde"
    type = models.CharField(max_length=10)  # Normal | Warning
    reason = models.CharField(max_length=40)
    message = models.TextField()
    time = models.DateTimeField()
    count = models.IntegerField(default=1)

    class Meta:
        verbose_name = "simulated event"
        verbose_name_plural = "simulated events"
        # (cluster, time): the tick's expiry of old events, one cluster at a time.
        indexes = [models.Index(fields=["cluster", "namespace", "workload", "time"]),
                   models.Index(fields=["cluster", "time"])]

    def __str__(self) -> str:
        return f"{self.type} {self.reason} {self.object}"


class SimLoad(models.Model):
    """Synthetic load of an endpoint (in its trigger metric's units), set for demos and tests."""

    cluster = cluster_field()
    namespace = models.CharField(max_length=63)
    workload = models.CharField(max_length=63)
    value = models.FloatField()

    class Meta:
        verbose_name = "simulated load"
        verbose_name_plural = "simulated loads"
        constraints = [models.UniqueConstraint(fields=["cluster", "namespace", "workload"],
                                               name="sandbox_load_unique")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.workload}={self.value}"


class SimClock(models.Model):
    """One row per cluster: when it last ticked. Locked by ``tick()``, so the ticks of one
    cluster serialise while those of two clusters run side by side."""

    cluster = models.CharField(max_length=63, unique=True)
    last_tick = models.DateTimeField(null=True, blank=True)
    resource_version = models.BigIntegerField(default=1)

    class Meta:
        verbose_name = "simulated clock"
        verbose_name_plural = "simulated clocks"

    def __str__(self) -> str:
        return f"{self.cluster} clock@{self.last_tick}"


class SimNodeOutage(models.Model):
    """A node of the inventory that is gone (a reclaimed spot node) since ``since``, until restored.

    Nodes are configuration (:mod:`sandbox.inventory`); only their absence is state, shared by
    every process like the rest of the cluster.
    """

    cluster = cluster_field()
    node = models.CharField(max_length=100)
    since = models.DateTimeField()
    reason = models.CharField(max_length=40, default="TerminationByKubelet")

    class Meta:
        verbose_name = "simulated node outage"
        verbose_name_plural = "simulated node outages"
        constraints = [models.UniqueConstraint(fields=["cluster", "node"], name="sandbox_outage_unique")]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.node} down since {self.since}"


class SimSilence(models.Model):
    """A cluster that does not answer since ``since`` (``manage.py sandbox silence``), until answered.

    A network partition, not a crash: every call of the cluster's backend fails with
    ``Transient``, but its tick goes on, so its work keeps running and may finish unseen.
    """

    cluster = models.CharField(max_length=63, unique=True)
    since = models.DateTimeField()

    class Meta:
        verbose_name = "simulated silence"
        verbose_name_plural = "simulated silences"

    def __str__(self) -> str:
        return f"{self.cluster} silent since {self.since}"


class SimNodeHeat(models.Model):
    """A node of the inventory whose GPUs run ``degrees`` hotter than their load makes them (a failed fan,
    a blocked air flow), until cooled: the exporter adds it to their temperature (:mod:`sandbox.exporter`)."""

    cluster = cluster_field()
    node = models.CharField(max_length=100)
    degrees = models.FloatField()

    class Meta:
        verbose_name = "simulated node overheating"
        verbose_name_plural = "simulated node overheatings"
        constraints = [models.UniqueConstraint(fields=["cluster", "node"], name="sandbox_heat_unique")]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.node} +{self.degrees:g} °C"


class SimEngine(models.Model):
    """A real inference engine process (:mod:`sandbox.engine`) standing for an endpoint replica's container,
    on this machine: where it listens, and its load as the kubelet last scraped it (:mod:`sandbox.engines`).

    One per running pod of a Deployment whose plan has an engine; its address is ``127.0.0.1:port``
    (the stand-in of the pod's IP and container port), which the replica answers on once its pod is
    ready. Written by the tick only, so the ticks' clock-row lock orders every change.
    """

    cluster = cluster_field()
    namespace = models.CharField(max_length=63)
    workload = models.CharField(max_length=63)
    pod = models.CharField(max_length=253)
    pid = models.PositiveIntegerField()
    port = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    #: The last scrape of its /metrics (wall-clock seconds; None: not scraped yet) and what it said:
    #: requests running and waiting, and the counters the next scrape takes rates from.
    scraped_at = models.FloatField(null=True, blank=True)
    running = models.PositiveIntegerField(default=0)
    waiting = models.PositiveIntegerField(default=0)
    requests = models.FloatField(default=0.0)  #: requests answered so far (finished and failed)
    occupancy = models.FloatField(default=0.0)  #: its ``slipway_sim_occupancy_seconds_total``
    #: Between its last two scrapes: the busy fraction of its slots (0-1: its GPU's utilization follows
    #: it) and the requests a second it answered.
    load = models.FloatField(default=0.0)
    rate = models.FloatField(default=0.0)

    class Meta:
        verbose_name = "simulated inference engine"
        verbose_name_plural = "simulated inference engines"
        constraints = [models.UniqueConstraint(fields=["cluster", "namespace", "pod"], name="sandbox_engine_unique")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod} on 127.0.0.1:{self.port} (pid {self.pid})"

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class SimPool(models.Model):
    """An elastic pool of the inventory (:class:`sandbox.inventory.ElasticPool`) once its cluster has used it:
    its live changes (``manage.py sandbox pool``) over the inventory's settings. Its row is created, with
    the ``min`` nodes it starts with, the first time the cluster is read or ticks (:mod:`sandbox.pools`)."""

    cluster = cluster_field()
    pool = models.CharField(max_length=100)  #: the pool's node prefix
    #: The settings changed live, by :class:`sandbox.inventory.PoolSettings` field name (the rest: the inventory's).
    overrides = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name = "simulated elastic pool"
        verbose_name_plural = "simulated elastic pools"
        constraints = [models.UniqueConstraint(fields=["cluster", "pool"], name="sandbox_pool_unique")]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.pool}"


class SimNode(models.Model):
    """A node of an elastic pool that exists: provisioning (asked for, not Ready) or ready. A node of an
    elastic pool without a row does not exist (no capacity, no scheduling, no telemetry)."""

    PROVISIONING, READY = "provisioning", "ready"

    cluster = cluster_field()
    pool = models.CharField(max_length=100)
    node = models.CharField(max_length=100)
    state = models.CharField(max_length=12, default=PROVISIONING)
    asked_at = models.DateTimeField()
    #: When it is (or became) Ready: drawn when it was asked for (sandbox.pools.provisioning_delay).
    ready_at = models.DateTimeField()
    #: It never becomes Ready: the cloud fails it at ``fails_at`` (None: it comes up).
    fails_at = models.DateTimeField(null=True, blank=True)
    #: Since when it is ready with no pod and no booking (None: in use, booked or provisioning).
    idle_since = models.DateTimeField(null=True, blank=True)
    #: The tick that found it idle for its pool's unneeded minutes: the next one removes it.
    unneeded_at = models.DateTimeField(null=True, blank=True)
    #: The ProvisioningRequest that booked it (``<namespace>/<name>``; "" : none).
    request = models.CharField(max_length=320, blank=True, default="")

    class Meta:
        verbose_name = "simulated pool node"
        verbose_name_plural = "simulated pool nodes"
        constraints = [models.UniqueConstraint(fields=["cluster", "node"], name="sandbox_pool_node_unique")]
        indexes = [models.Index(fields=["cluster", "pool"])]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.node} {self.state}"
