"""What sharing one physical GPU does to its pods: the sandbox's model of time-slicing and MPS (pure).

The device plugin of a shared node (:class:`sandbox.inventory.GpuSharing`) hands each pod one
replica of one physical GPU; :func:`pack` picks which, as the sandbox's scheduler step binds the
pod: the GPU with the most replicas in use that still has a free one. What the pods of one GPU
then get is decided here, from its *tenants* (:class:`Tenant`), once per tick:

* **time-slicing** (:func:`time_sliced`) — the GPU takes turns between the pods busy on it, so
  each of ``k`` busy pods progresses at ``1/k`` speed (a run's duration stretches) and is
  reported at ``1/k`` of the utilisation it would have alone. Memory is not isolated: each pod
  allocates its memory (``SLIPWAY_SIM_GPU_MEMORY_GB``) as it starts, and the pod whose
  allocation no longer fits beside what the others hold is OOMKilled
  (:data:`MEMORY_GROW_SECONDS` later), with a message that names the sharing. The others run on;
  a server killed so restarts in place, and runs again once the memory it needs is free.
* **MPS** (:func:`mps`) — the clients' kernels run concurrently: nobody slows down, and each is
  reported at its share of the GPU (its utilisation / replicas). Each client is limited to its
  share of the memory (GPU memory / replicas): a pod that asks for more fails alone.

A pod pinned below :data:`BUSY_UTIL_PCT` (``SLIPWAY_SIM_GPU_UTIL``) barely uses its time slices:
it slows nobody down (it still holds its memory).

Progress is kept as a checkpoint per pod (seconds of work done by a time), written only while a
GPU is shared by busy pods, so a pod that runs alone costs nothing here and ends at its start
plus its duration, as on a whole GPU (:func:`run_end`).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from cluster.specs import SHARING_MPS, SHARING_TIME_SLICING

#: Seconds a pod takes to allocate its GPU memory after its container starts: when an allocation
#: that does not fit kills it.
MEMORY_GROW_SECONDS = 5
#: A pod pinned below this utilisation (percent) does not take turns on a time-sliced GPU.
BUSY_UTIL_PCT = 10.0
#: The kubelet's reason and exit code for a container killed for memory.
OOM_KILLED, OOM_EXIT_CODE = "OOMKilled", 137
#: Rounding slack when a run's remaining work reaches zero (seconds).
_EPSILON = 1e-6


@dataclass
class Tenant:
    """One pod on one physical GPU, as the model needs it."""

    key: Hashable
    #: When its container starts (it may be later in this tick than its row says); None: never.
    start: datetime | None
    #: Seconds of work its run needs at full speed; None: a server, which runs until stopped.
    work: float | None
    memory_gib: float
    busy: bool
    #: Its checkpoint: ``progress`` seconds done by ``since`` (None: never slowed, 0 done at start).
    progress: float = 0.0
    since: datetime | None = None
    #: A server this GPU's memory already killed: crash-looping, holding none of it.
    crashed: bool = False


@dataclass
class Verdict:
    """What happens to one tenant by ``now``: a new checkpoint, an OOM kill, a revival."""

    progress: float | None = None
    progress_at: datetime | None = None
    #: When its allocation kills it (may be after ``now``: not yet), and what its container says.
    oom_at: datetime | None = None
    oom_message: str = ""
    revive: bool = False
    #: When its pace changed within the step (:data:`Mark`), oldest first: its log's steps follow them.
    marks: tuple[Mark, ...] = ()


def is_busy(plan: dict) -> bool:
    """Whether a pod of ``plan`` takes turns on a time-sliced GPU (not pinned idle)."""
    util = plan.get("util")
    return util is None or util >= BUSY_UTIL_PCT


def pack(in_use: list[int], replicas: int) -> int | None:
    """The GPU a new shared pod gets: the one with the most replicas in use that still has a free
    one (the lowest index among equals), so whole GPUs stay free for as long as possible."""
    free = [index for index, used in enumerate(in_use) if used < replicas]
    return max(free, key=lambda index: (in_use[index], -index)) if free else None


def _gib(value: float) -> str:
    return f"{value:.1f} GiB"


def time_slicing_oom(others: int, held_gib: float, total_gib: float, asked_gib: float) -> str:
    """What a pod killed by a time-sliced GPU's memory says (its container's termination message)."""
    pods = "pod" if others == 1 else "pods"
    return (f"GPU memory is shared with {others} other {pods} on this time-sliced GPU: they hold "
            f"{_gib(held_gib)} of its {_gib(total_gib)}, this pod asked for {_gib(asked_gib)}")


def mps_oom(replicas: int, total_gib: float, asked_gib: float) -> str:
    """What an MPS client over its memory limit says."""
    return (f"MPS limits each of this GPU's {replicas} clients to {_gib(total_gib / replicas)} of its "
            f"{_gib(total_gib)}; this pod asked for {_gib(asked_gib)}")


def run_end(started_at: datetime, duration: float, progress: float, progress_at: datetime | None) -> datetime:
    """When a run of ``duration`` seconds of work ends, from its last checkpoint (none: its start),
    running at full speed from there: a checkpoint after which it was slowed is written anew."""
    if progress_at is None:
        return started_at + timedelta(seconds=duration)
    return progress_at + timedelta(seconds=max(duration - progress, 0.0))


#: A change of a pod's pace on a time-sliced GPU: from ``at`` on, with ``work`` seconds done, it works
#: ``rate`` seconds a second (``1/k`` while ``k`` busy pods take turns, 1 alone).
Mark = tuple[datetime, float, float]


@dataclass(frozen=True)
class Pace:
    """How much work a run on a time-sliced GPU had done when: its pace's changes (``marks``, each
    when others joined or left its GPU; before the first it ran alone), its last checkpoint
    (``progress`` by ``since``) and its ``rate`` since. What its training log's steps follow, so its
    progress, and the ETA read from it, go at the shared speed rather than the clock's — and each
    line keeps its time from one read of the log to the next."""

    marks: tuple[Mark, ...]
    progress: float
    since: datetime
    rate: float

    def _segments(self, started: datetime) -> list[Mark]:
        """Every stretch of one pace, from the start: alone, each mark, then the rate since the checkpoint."""
        marks = [m for m in self.marks if m[0] >= started]
        first = [(started, 0.0, 1.0)] if not marks or marks[0][0] > started else []
        segments = first + marks
        if self.since > segments[-1][0] and self.rate != segments[-1][2]:
            segments.append((self.since, self.progress, self.rate))
        return segments

    def work(self, started: datetime, at: datetime) -> float:
        """Seconds of work done by ``at``."""
        done = 0.0
        for when, work, rate in self._segments(started):
            if when > at:
                break
            done = work + (at - when).total_seconds() * rate
        return done

    def wall(self, started: datetime, work: float) -> float:
        """Seconds after ``started`` at which ``work`` seconds of work were done (the inverse of :meth:`work`)."""
        segments = self._segments(started)
        for (when, done, rate), following in zip(segments, [*segments[1:], None], strict=True):
            if following is None or work <= following[1]:
                offset = (when - started).total_seconds()
                return offset + (work - done) / rate if rate > 0 else float("inf")
        return float("inf")  # not reached: the last segment takes any work


def pace(marks: list, progress: float, progress_at: datetime | None, started: datetime, busy_here: int, busy: bool,
         strategy: str) -> Pace | None:
    """A pod's :class:`Pace` from its stored ``marks`` (``[[unix seconds, work, rate], …]``) and checkpoint, None
    when it has always run at full speed and still does (its log follows the clock)."""
    rate = 1.0 / busy_here if strategy == SHARING_TIME_SLICING and busy and busy_here > 1 else 1.0
    if not marks and progress_at is None and rate == 1.0:
        return None
    stored = tuple((datetime.fromtimestamp(t, tz=UTC), float(w), float(r)) for t, w, r in marks)
    return Pace(stored, progress if progress_at is not None else 0.0, progress_at or started, rate)


def utilization(alone: float, strategy: str, busy_pods: int, replicas: int, busy: bool) -> int:
    """A pod's utilisation as the simulated DCGM exporter reports it on a shared GPU, from what it
    would be alone: time-sliced, a busy pod gets 1/k of the GPU's time; an MPS client its share."""
    if strategy == SHARING_MPS:
        return int(alone / replicas)
    if strategy == SHARING_TIME_SLICING and busy:
        return int(alone / max(busy_pods, 1))
    return int(alone)


def mps(tenants: list[Tenant], memory_gib: float, replicas: int, now: datetime) -> dict[Hashable, Verdict]:
    """MPS: no slowdown; a client over its memory limit (``memory_gib / replicas``) is killed, alone."""
    limit = memory_gib / replicas
    verdicts: dict[Hashable, Verdict] = {}
    for tenant in tenants:
        if tenant.crashed or tenant.start is None or tenant.start > now or tenant.since is not None:
            continue  # a checkpointed tenant passed its allocation long ago
        if tenant.memory_gib > limit + _EPSILON:
            verdicts[tenant.key] = Verdict(oom_at=tenant.start + timedelta(seconds=MEMORY_GROW_SECONDS),
                                           oom_message=mps_oom(replicas, memory_gib, tenant.memory_gib))
    return verdicts


@dataclass
class _Run:
    tenant: Tenant
    progress: float
    finished: float | None = None  # seconds after the loop's origin
    marks: list = field(default_factory=list)  # its pace's changes in this step (Mark)


def time_sliced(tenants: list[Tenant], memory_gib: float, now: datetime) -> dict[Hashable, Verdict]:
    """Time-slicing on one GPU from its tenants' checkpoints to ``now``.

    An event loop over what changes the turns: a tenant joins (at its checkpoint; a tenant never
    checkpointed joins at its start, when it allocates its memory: it is the one killed if that
    does not fit beside what the others hold — a checkpointed tenant allocated long before), or
    one's run ends (freeing its memory). Between events each of the k busy tenants does 1/k of a
    second of work per second, an idle one a full second. Tenants get a new checkpoint at ``now``
    (or at their end) only if two were busy at once; a crashed server revives when its memory fits.
    """
    verdicts: dict[Hashable, Verdict] = {}
    live = [t for t in tenants if not t.crashed and t.start is not None and t.start <= now]
    if not live:
        return verdicts
    origin = min(t.since or t.start for t in live)

    def joins_at(tenant: Tenant) -> float:  # seconds after origin
        return ((tenant.since or tenant.start) - origin).total_seconds()

    horizon = (now - origin).total_seconds()
    joins = sorted(live, key=lambda t: (joins_at(t), str(t.key)))
    # Who holds memory: tenants checkpointed allocated before any other could start.
    holding = {t.key: t.memory_gib for t in live if t.since is not None}
    runs: list[_Run] = []  # joined, not finished
    ended: list[_Run] = []
    shared = False
    clock = 0.0
    while True:
        while joins and joins_at(joins[0]) <= clock:
            tenant = joins.pop(0)
            if tenant.since is None:  # its allocation, now: fits beside what the others hold, or kills it
                held = sum(holding.values())
                if held + tenant.memory_gib > memory_gib + _EPSILON:
                    verdicts[tenant.key] = Verdict(
                        oom_at=tenant.start + timedelta(seconds=MEMORY_GROW_SECONDS),
                        oom_message=time_slicing_oom(len(holding), held, memory_gib, tenant.memory_gib))
                    continue
                holding[tenant.key] = tenant.memory_gib
            runs.append(_Run(tenant, tenant.progress if tenant.since is not None else 0.0))
        busy = sum(run.tenant.busy for run in runs)
        shared = shared or busy >= 2
        rates = {id(run): (1.0 / busy if run.tenant.busy else 1.0) for run in runs}
        for run in runs:
            if not run.marks or run.marks[-1][2] != rates[id(run)]:
                run.marks.append((origin + timedelta(seconds=clock), run.progress, rates[id(run)]))
        step = horizon - clock
        if joins:
            step = min(step, joins_at(joins[0]) - clock)
        for run in runs:
            if run.tenant.work is not None:
                step = min(step, max(run.tenant.work - run.progress, 0.0) / rates[id(run)])
        for run in runs:
            run.progress += step * rates[id(run)]
        clock += step
        for run in [r for r in runs if r.tenant.work is not None and r.progress >= r.tenant.work - _EPSILON]:
            run.finished = clock
            runs.remove(run)
            ended.append(run)
            holding.pop(run.tenant.key, None)
        if clock >= horizon - _EPSILON and not (joins and joins_at(joins[0]) <= clock):
            break
    if shared:
        for run in runs:
            verdicts[run.tenant.key] = Verdict(progress=run.progress, progress_at=now, marks=tuple(run.marks))
        for run in ended:
            verdicts[run.tenant.key] = Verdict(progress=run.tenant.work,
                                               progress_at=origin + timedelta(seconds=run.finished),
                                               marks=tuple(run.marks))
    held = sum(holding.values())
    for tenant in tenants:
        if tenant.crashed and held + tenant.memory_gib <= memory_gib + _EPSILON:
            held += tenant.memory_gib  # its next restart finds the memory it needs
            verdicts[tenant.key] = Verdict(revive=True)
    return verdicts
