"""One tick of the sandbox cluster: the kubelet, the controllers and the scheduler, in memory.

``Tick(now).run()`` loads every live object and pod in a few queries (plain records, see
:mod:`sandbox.bulk`), advances them to ``now`` in memory, and writes back only what changed
with one ``executemany`` per table, so a tick over 10,000 workloads stays cheap. The caller (:meth:`sandbox.backend.SandboxBackend.tick`)
holds the clock row's lock, so ticks never overlap.

Order within a tick (each step sees the previous one's results):

1. kubelet: bound pods move ContainerCreating → Running → Succeeded/Failed by their times;
2. controllers: Jobs, PyTorchJobs and Deployments (scaled by their ScaledObjects) react to
   finished pods, deadlines and replica counts, and create pods within the ResourceQuota;
3. scheduler: unbound pods are bound by fit (PyTorchJob pods as one gang) or get a
   FailedScheduling message.

Pod lifecycle stages (``SimPod.stage``; events are emitted once when a stage is reached):
0 created, 1 bound (Scheduled, Pulling), 2 started (Pulled, Created, Started) or image pull
failed, 3 ready (servers past their readiness delay), 4 terminated, 5 crash-looping.

Quiet workloads cost almost nothing: a controller whose pods did not change this tick, and
that has nothing due (deadline, missing pods, a new replica target), returns before even
decoding its status.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from sandbox.bulk import Record, fast_insert, fast_update
from sandbox.bulk import load as load_records
from sandbox.bulk import new as new_record
from sandbox.inventory import nodes as inventory_nodes
from sandbox.models import SimEvent, SimLoad, SimObject, SimPod
from sandbox.quantity import format_units
from sandbox.scheduler import Scheduler
from sandbox.simulation import PULL_SECONDS, TERMINATION, default_load, pod_outcome, stable_int, wanted_replicas

STAGE_CREATED, STAGE_BOUND, STAGE_STARTED, STAGE_READY, STAGE_DONE, STAGE_CRASHING = 0, 1, 2, 3, 4, 5
CONTROLLED = ("Job", "PyTorchJob", "Deployment", "ScaledObject", "ResourceQuota")
CRASH_OUTCOMES = ("fail", "oom", "crashloop")
#: Kubernetes' alphabet for generated name suffixes (no vowels, no look-alikes).
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
BATCH = 500
#: The tick works on plain records of these tables (see sandbox.bulk), not model instances.
ObjRow = Record
PodRow = Record
OBJECT_COLUMNS = ("id", "kind", "namespace", "name", "workload", "team", "uid", "resource_version", "status", "memo",
                  "replicas", "done", "generation")
#: Plans only change when an object is applied (which bumps its resourceVersion), so each
#: process keeps them decoded: (uid, resourceVersion) -> plan. Long-lived worker/beat
#: processes then read only the small status/memo columns per tick.
PLANS: dict[tuple[str, int], dict] = {}
_PLAN_CACHE_MAX = 200_000
ACTIVE_REFRESH_SECONDS = 300
JOB_BACKOFF_START, JOB_BACKOFF_CAP = 10, 360
#: Deployment progressDeadlineSeconds default.
PROGRESS_DEADLINE = 600


#: The exit code of a container stopped by SIGTERM (a PyTorchJob gang's restart kills the rest).
KILLED_EXIT_CODE = 143


def rfc3339(t: datetime | None) -> str | None:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ") if t else None


def name_suffix(*parts: object, length: int = 5) -> str:
    n = stable_int(*parts)
    out = []
    for _ in range(length):
        n, r = divmod(n, len(_ALPHABET))
        out.append(_ALPHABET[r])
    return "".join(out)


def replicaset_name(deployment: str, template_hash: str) -> str:
    return f"{deployment}-{name_suffix(template_hash, length=10)}"


class Tick:
    """The state of one tick: rows loaded once, changes collected, written back at the end."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.nodes = inventory_nodes()
        self.events: list[Record] = []
        self.new_pods: list[PodRow] = []
        self.changed_pods: dict[int, PodRow] = {}
        self.deleted_pods: set[int] = set()
        self.reset_owners: set[int] = set()
        self.changed_objects: dict[int, ObjRow] = {}
        self.usage: dict[str, dict[str, int]] | None = None
        #: Owners whose pods changed this tick; the others are skipped when nothing is due.
        self.attention: set[int] = set()

    # -- bookkeeping ------------------------------------------------------------------------

    def event(self, obj: ObjRow | PodRow, ref: str, type_: str, reason: str, message: str,
              at: datetime | None = None) -> None:
        self.events.append(new_record(SimEvent, namespace=obj.namespace, workload=obj.workload, object=ref,
                                      type=type_, reason=reason, message=message, time=at or self.now))

    def touch(self, pod: PodRow) -> None:
        self.attention.add(pod.owner_id)
        if pod.pk is not None:
            self.changed_pods[pod.pk] = pod

    def dirty(self, obj: ObjRow) -> None:
        self.changed_objects[obj.pk] = obj

    def set_status(self, obj: ObjRow, status: dict) -> None:
        if status != obj.status:
            obj.status = status
            self.dirty(obj)

    def plan_of(self, pod: PodRow) -> dict:
        return self.owners[pod.owner_id].plan["pods"][pod.role]

    # -- 0. load ------------------------------------------------------------------------------

    def load(self) -> None:
        # The manifest column (the biggest) is never read here: plans carry what the clock needs.
        live = SimObject.objects.filter(done=False, kind__in=CONTROLLED)
        objects = load_records(live, OBJECT_COLUMNS, lazy=("status", "memo"))
        missing = [o.pk for o in objects if (o.uid, o.resource_version) not in PLANS]
        if missing:
            if len(PLANS) > _PLAN_CACHE_MAX:
                PLANS.clear()
            found = (live.values_list("uid", "resource_version", "plan") if len(missing) > 500
                     else SimObject.objects.filter(pk__in=missing).values_list("uid", "resource_version", "plan"))
            for uid, version, plan in found:
                PLANS[(uid, version)] = plan
        for o in objects:
            o.plan = PLANS.get((o.uid, o.resource_version))
        # An object re-applied between the two reads is picked up by the next tick.
        objects = [o for o in objects if o.plan is not None]
        self.owners = {o.pk: o for o in objects if o.kind in ("Job", "PyTorchJob", "Deployment")}
        self.scaled = {(o.namespace, o.plan.get("target")): o for o in objects if o.kind == "ScaledObject"}
        self.quotas: dict[str, list[ObjRow]] = defaultdict(list)
        for o in objects:
            if o.kind == "ResourceQuota":
                self.quotas[o.namespace].append(o)
        self.loads = {(ns, wl): v for ns, wl, v in SimLoad.objects.values_list("namespace", "workload", "value")}
        self.pods_by_owner: dict[int, list[PodRow]] = defaultdict(list)
        for pod in load_records(SimPod.objects.filter(active=True)):
            if pod.owner_id in self.owners:
                self.pods_by_owner[pod.owner_id].append(pod)
        self.finished: dict[int, list[PodRow]] = defaultdict(list)  # pods that ended this tick

    # -- 1. kubelet -----------------------------------------------------------------------------

    def advance(self, pod: PodRow, owner: ObjRow) -> None:
        if not pod.node or pod.scheduled_at is None or not pod.active:
            return
        plan = self.plan_of(pod)
        start = pod.scheduled_at + timedelta(seconds=PULL_SECONDS)
        outcome = pod_outcome(plan, owner.kind, pod.index)
        pod_ref = f"Pod/{pod.name}"
        if outcome == "image-pull":
            if pod.stage < STAGE_STARTED and self.now >= start:
                pod.stage = STAGE_STARTED
                self.event(pod, pod_ref, "Warning", "Failed", f'Failed to pull image "{plan["img"]}": rpc error: code = '
                           f'NotFound desc = failed to pull and unpack image "{plan["img"]}": not found', start)
                self.event(pod, pod_ref, "Warning", "Failed", "Error: ErrImagePull", start)
                self.event(pod, pod_ref, "Normal", "BackOff", f'Back-off pulling image "{plan["img"]}"',
                           start + timedelta(seconds=1))
                self.touch(pod)
            return
        if pod.stage < STAGE_STARTED and self.now >= start:
            pod.stage, pod.phase, pod.started_at = STAGE_STARTED, "Running", start
            self.event(pod, pod_ref, "Normal", "Pulled",
                       f'Successfully pulled image "{plan["img"]}" in {PULL_SECONDS - 1}.2s', start)
            self.event(pod, pod_ref, "Normal", "Created", f"Created container {plan['ctr']}", start)
            self.event(pod, pod_ref, "Normal", "Started", f"Started container {plan['ctr']}", start)
            self.touch(pod)
        if pod.phase != "Running" or pod.started_at is None:
            return
        end = pod.started_at + timedelta(seconds=plan["dur"])
        if owner.kind == "Deployment":
            if pod.stage == STAGE_STARTED and outcome not in CRASH_OUTCOMES and pod_ready(pod, plan, self.now):
                pod.stage = STAGE_READY  # no event: the readiness probe passing is silent
                self.touch(pod)
            # restartPolicy Always: a crashing server is restarted in place, forever.
            if outcome in CRASH_OUTCOMES and pod.stage < STAGE_CRASHING and self.now >= end:
                pod.stage = STAGE_CRASHING
                if outcome == "oom":
                    self.event(pod, pod_ref, "Warning", "OOMKilling",
                               f"Memory cgroup out of memory: Killed process in container {plan['ctr']}", end)
                self.event(pod, pod_ref, "Warning", "BackOff",
                           f"Back-off restarting failed container {plan['ctr']} in pod {pod.name}_{pod.namespace}",
                           end + timedelta(seconds=1))
                self.touch(pod)
            return
        if self.now >= end:
            reason, code = TERMINATION.get(outcome, ("Error", 1))
            self.terminate(pod, "Succeeded" if outcome == "succeed" else "Failed", reason, code, end)
            if outcome == "oom":
                self.event(pod, pod_ref, "Warning", "OOMKilling",
                           f"Memory cgroup out of memory: Killed process in container {plan['ctr']}", end)

    def terminate(self, pod: PodRow, phase: str, reason: str, code: int, at: datetime) -> None:
        pod.phase, pod.reason, pod.exit_code, pod.finished_at = phase, reason, code, at
        self._release(pod)
        pod.active, pod.stage = False, STAGE_DONE
        self.finished[pod.owner_id].append(pod)
        self.touch(pod)

    def kill(self, pod: PodRow, owner: ObjRow, reason: str = "Error") -> None:
        """Stop a pod whose gang is restarted: SIGTERM, exit 143 (the rows go before the new gang is created)."""
        plan = self.plan_of(pod)
        if pod.phase == "Running":
            self.event(pod, f"Pod/{pod.name}", "Normal", "Killing", f"Stopping container {plan['ctr']}")
        pod.phase, pod.reason, pod.exit_code, pod.finished_at = "Failed", reason, KILLED_EXIT_CODE, self.now
        self._release(pod)
        pod.active, pod.stage = False, STAGE_DONE
        self.touch(pod)

    def remove(self, pod: PodRow, owner: ObjRow) -> None:
        """Delete a pod (scale down, template change)."""
        if pod.phase == "Running":
            self.event(pod, f"Pod/{pod.name}", "Normal", "Killing", f"Stopping container {self.plan_of(pod)['ctr']}")
        self._release(pod)
        pod.active = False
        if pod.pk is not None:
            self.deleted_pods.add(pod.pk)
            self.changed_pods.pop(pod.pk, None)
        else:
            self.new_pods.remove(pod)

    # -- quota ------------------------------------------------------------------------------------

    def _release(self, pod: PodRow) -> None:
        """An active pod stops counting against its namespace's quota (once usage is known)."""
        if self.usage is not None and pod.active:
            self._count(self.usage[pod.namespace], self.plan_of(pod), -1)

    def compute_usage(self) -> None:
        self.usage = defaultdict(lambda: defaultdict(int))
        for pods in self.pods_by_owner.values():
            for pod in pods:
                if pod.active:
                    self._count(self.usage[pod.namespace], self.plan_of(pod), +1)

    @staticmethod
    def _count(usage: dict[str, int], plan: dict, sign: int) -> None:
        usage["pods"] += sign
        for resource, units in plan["req"].items():
            usage[resource] += sign * units

    def quota_denial(self, namespace: str, plans: list[dict], pod_name: str) -> str:
        """The API server's quota error for creating these pods, or "" when they fit."""
        wanted: dict[str, int] = defaultdict(int)
        for plan in plans:
            self._count(wanted, plan, +1)
        used = self.usage[namespace]
        for quota in self.quotas.get(namespace, []):
            over = []
            for key, hard in sorted(quota.plan.get("hard", {}).items()):
                resource = key.removeprefix("requests.").removeprefix("limits.")
                if wanted.get(resource, 0) and used.get(resource, 0) + wanted[resource] > hard:
                    over.append((key, resource, hard))
            if over:
                fmt = lambda values: ",".join(f"{k}={format_units(r, v)}" for k, r, v in values)  # noqa: E731
                requested = fmt([(k, r, wanted[r]) for k, r, _ in over])
                in_use = fmt([(k, r, used.get(r, 0)) for k, r, _ in over])
                limited = fmt(over)
                return (f'pods "{pod_name}" is forbidden: exceeded quota: {quota.name}, requested: {requested}, '
                        f"used: {in_use}, limited: {limited}")
        return ""

    def create_pods(self, owner: ObjRow, specs: list[tuple[int, int, str]], failed_ref: str) -> bool:
        """Create pods (role, index, name) all-or-nothing within quota; FailedCreate when denied."""
        plans = [owner.plan["pods"][role] for role, _, _ in specs]
        denial = self.quota_denial(owner.namespace, plans, specs[0][2])
        if denial:
            message = f"Error creating: {denial}"
            if owner.memo.get("failed_create") != message:
                owner.memo["failed_create"] = message
                self.event(owner, failed_ref, "Warning", "FailedCreate", message)
                self.dirty(owner)
            return False
        if owner.memo.pop("failed_create", None):
            self.dirty(owner)
        for (role, index, name), plan in zip(specs, plans, strict=True):
            pod = new_record(SimPod, owner_id=owner.pk, namespace=owner.namespace, name=name,
                             workload=owner.workload, role=role, index=index, template_hash=plan["hash"],
                             created_at=self.now)
            self.new_pods.append(pod)
            self.pods_by_owner[owner.pk].append(pod)
            self._count(self.usage[owner.namespace], plan, +1)
            self.event(owner, failed_ref, "Normal", "SuccessfulCreate", f"Created pod: {name}")
        return True

    # -- 2. controllers ---------------------------------------------------------------------------

    def _quiet(self, owner: ObjRow, pods: list[PodRow]) -> bool:
        """Nothing can have changed: pods exist and are untouched, and no deadline is due."""
        if owner.pk in self.attention or not pods:
            return False
        deadline = owner.plan.get("deadline")
        if deadline is None:
            return True
        return "start" in owner.memo and self.now < _parse(owner.memo["start"]) + timedelta(seconds=int(deadline))

    def job(self, job: ObjRow) -> None:
        pods = [p for p in self.pods_by_owner.get(job.pk, []) if p.active]
        if self._quiet(job, pods):
            return
        status = dict(job.status)
        memo = job.memo
        status.setdefault("startTime", rfc3339(self.now))
        memo.setdefault("start", rfc3339(self.now))
        ref = f"Job/{job.name}"
        ended = self.finished.get(job.pk, [])
        failed = int(status.get("failed", 0)) + sum(p.phase == "Failed" for p in ended)
        succeeded = int(status.get("succeeded", 0)) + sum(p.phase == "Succeeded" for p in ended)
        if failed:
            status["failed"] = failed
        if succeeded:
            status["succeeded"] = succeeded
        deadline = job.plan.get("deadline")
        started = _parse(memo["start"])
        if succeeded:
            finish = max(p.finished_at for p in ended if p.phase == "Succeeded")
            status["completionTime"] = rfc3339(finish)
            status["conditions"] = [_cond("Complete", "CompletionsReached", "Reached expected number of succeeded pods",
                                          self.now)]
            self.event(job, ref, "Normal", "Completed", "Job completed")
            job.done = True
        elif deadline is not None and self.now >= started + timedelta(seconds=int(deadline)):
            for pod in pods:
                self.remove(pod, job)  # the Job controller deletes its active pods
            pods = []
            status["conditions"] = [_cond("Failed", "DeadlineExceeded", "Job was active longer than specified deadline",
                                          self.now)]
            self.event(job, ref, "Warning", "DeadlineExceeded", "Job was active longer than specified deadline")
            job.done = True
        elif failed > int(job.plan.get("backoff", 6)):
            status["conditions"] = [_cond("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit",
                                          self.now)]
            self.event(job, ref, "Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
            job.done = True
        elif not pods:
            if ended and failed:
                # The Job controller's back-off before the next attempt: 10s, 20s, 40s … capped at 6 minutes.
                delay = min(JOB_BACKOFF_START * 2 ** (failed - 1), JOB_BACKOFF_CAP)
                memo["retry_at"] = (max(p.finished_at for p in ended) + timedelta(seconds=delay)).timestamp()
                self.dirty(job)
            seq = int(memo.get("seq", 0))
            name = f"{job.name[:57]}-{name_suffix(job.uid, seq)}"
            # The pod's index is its attempt (0-based): SLIPWAY_SIM_FAILED_ATTEMPTS reads it.
            if self.now.timestamp() >= memo.get("retry_at", 0) and self.create_pods(job, [(0, seq, name)], ref):
                memo["seq"] = seq + 1
                self.dirty(job)
        if job.done:
            status["completionTime"] = status.get("completionTime") or rfc3339(self.now)
            self.dirty(job)
        live = [p for p in self.pods_by_owner.get(job.pk, []) if p.active]
        status["active"] = len(live)
        status["ready"] = sum(p.phase == "Running" for p in live)
        if not status["active"]:
            status.pop("active")
        self.set_status(job, status)

    def keep_previous_runs(self, job: ObjRow, restarts: int) -> None:
        """Remember how each replica's run before a restart went, for the pods that replace them.

        The sandbox restarts a PyTorchJob's gang with new pods of the same names; a real cluster
        restarts each replica's container in place (``restartPolicy: OnFailure``), so the
        replacement shows what the kubelet would: ``restartCount`` and ``lastState.terminated``,
        and its previous log (:meth:`sandbox.backend.SandboxBackend.logs` with ``previous``).
        Only the run just before is kept, as the kubelet keeps one.
        """
        previous = dict(job.memo.get("previous") or {})
        for pod in self.pods_by_owner.get(job.pk, []):
            if pod.started_at is not None:
                previous[pod.name] = {"restarts": restarts, "started": rfc3339(pod.started_at),
                                      "finished": rfc3339(pod.finished_at or self.now), "reason": pod.reason or "Error",
                                      "code": pod.exit_code if pod.exit_code is not None else 1}
        job.memo["previous"] = previous

    def pytorchjob(self, job: ObjRow) -> None:
        pods = [p for p in self.pods_by_owner.get(job.pk, []) if p.active]
        if self._quiet(job, pods):
            return
        status = dict(job.status)
        conditions = list(status.get("conditions") or [])
        memo = job.memo
        ref = f"PyTorchJob/{job.name}"
        key = f"PyTorchJob {job.name}"
        if not conditions:
            conditions.append(_cond("Created", "PyTorchJobCreated", f"{key} is created.", self.now))
            status["startTime"] = rfc3339(self.now)
            memo["start"] = rfc3339(self.now)
            self.dirty(job)
        ended = self.finished.get(job.pk, [])
        failed = [p for p in ended if p.phase == "Failed"]
        master_done = any(p.phase == "Succeeded" and job.plan["pods"][p.role]["role"] == "Master" for p in ended)
        started = _parse(memo["start"])
        deadline = job.plan.get("deadline")
        final = None
        if failed:
            roles = defaultdict(int)
            for p in failed:
                roles[job.plan["pods"][p.role]["role"]] += 1
            what = ", ".join(f"{n} {role} replica(s)" for role, n in sorted(roles.items()))
            restarts = int(memo.get("restarts", 0))
            if restarts < int(job.plan.get("backoff", 6)):
                memo["restarts"] = restarts + 1
                for pod in pods:
                    self.kill(pod, job)
                self.keep_previous_runs(job, restarts + 1)
                self.reset_owners.add(job.pk)
                self.pods_by_owner[job.pk] = []
                pods = []
                conditions = _set_cond(conditions, "Running", "False", "PyTorchJobRestarting", "", self.now)
                conditions = _set_cond(conditions, "Restarting", "True", "PyTorchJobRestarting",
                                       f"{key} is restarting because {what} failed.", self.now)
                self.event(job, ref, "Warning", "PyTorchJobRestarting", f"{key} is restarting because {what} failed.")
                self.dirty(job)
            else:
                final = ("Failed", "PyTorchJobFailed", f"{key} is failed because {what} failed.")
        elif master_done:
            final = ("Succeeded", "PyTorchJobSucceeded", f"{key} is successfully completed.")
        elif deadline is not None and self.now >= started + timedelta(seconds=int(deadline)):
            final = ("Failed", "DeadlineExceeded", f"{key} has failed because it was active longer than specified "
                     "deadline")
        if final:
            kind, reason, message = final
            for pod in pods:
                if kind == "Succeeded" and pod.phase == "Running":
                    self.terminate(pod, "Succeeded", "Completed", 0, self.now)
                else:
                    self.remove(pod, job)  # cleanPodPolicy Running: the failed pods stay, the rest go
            conditions = _set_cond(conditions, "Running", "False", reason, message, self.now)
            conditions = _set_cond(conditions, kind, "True", reason, message, self.now)
            status["completionTime"] = rfc3339(self.now)
            self.event(job, ref, "Normal" if kind == "Succeeded" else "Warning", reason, message)
            job.done = True
            self.dirty(job)
        elif not pods:
            specs = [
                (role, index, f"{job.name[:40]}-{plan['role'].lower()}-{index}")
                for role, plan in enumerate(job.plan["pods"]) for index in range(plan["count"])
            ]
            self.create_pods(job, specs, ref)
        live = [p for p in self.pods_by_owner.get(job.pk, []) if p.active]
        if not job.done and live and all(p.phase == "Running" for p in live) and not _has(conditions, "Running"):
            conditions = _set_cond(conditions, "Restarting", "False", "PyTorchJobRunning", "", self.now)
            conditions = _set_cond(conditions, "Running", "True", "PyTorchJobRunning", f"{key} is running.", self.now)
        replica_statuses: dict[str, dict[str, int]] = {}
        for role, plan in enumerate(job.plan["pods"]):
            mine = [p for p in self.pods_by_owner.get(job.pk, []) if p.role == role]
            entry = {"active": sum(p.active for p in mine)}
            done_ok = sum(p.phase == "Succeeded" for p in mine)
            done_bad = sum(p.phase == "Failed" for p in mine)
            if done_ok:
                entry["succeeded"] = done_ok
            if done_bad:
                entry["failed"] = done_bad
            replica_statuses[plan["role"]] = entry
        status["replicaStatuses"] = replica_statuses
        status["conditions"] = [c for c in conditions if not (c["type"] == "Restarting" and c["status"] == "False")]
        self.set_status(job, status)

    def deployment(self, dep: ObjRow) -> None:
        template_hash = dep.plan["pods"][0]["hash"]
        scaled = self.scaled.get((dep.namespace, dep.name))
        if scaled is not None:
            sp = scaled.plan
            load = endpoint_load(self.loads, dep.namespace, dep.workload, sp, self.now)
            wanted = wanted_replicas(load, sp["threshold"], sp["min"])
            desired = self.stabilized(scaled, dep, min(max(wanted, sp["min"]), sp["max"]))
            self.scaledobject_status(scaled, load > 0)
            self.autoscaler_status(scaled, load, wanted, desired)
        else:
            desired = dep.plan.get("replicas")
            desired = 1 if desired is None else int(desired)
        pods = [p for p in self.pods_by_owner.get(dep.pk, []) if p.active]
        if (dep.pk not in self.attention and desired == dep.replicas == len(pods)
                and all(p.stage == STAGE_READY and p.template_hash == template_hash for p in pods)
                and not dep.memo.get("failed_create")):
            return  # every replica ready and nothing changed: the stored status still holds
        self.deployment_pods(dep, desired, pods)

    def stabilized(self, scaled: ObjRow, dep: ObjRow, desired: int) -> int:
        """The HPA's scale-down stabilization: fewer replicas only once wanted for ``down_delay`` seconds.

        Except above the ScaledObject's ``maxReplicaCount`` (it was lowered): as Kubernetes' HPA
        does ("Current number of replicas above Spec.MaxReplicas"), those go at once, with no
        stabilization; the window applies from the maximum down.
        """
        held = min(dep.replicas, scaled.plan["max"])
        if desired >= held:
            if scaled.memo.pop("below_since", None) is not None:
                self.dirty(scaled)
            return desired
        since = scaled.memo.get("below_since")
        if since is None:
            scaled.memo["below_since"] = self.now.timestamp()
            self.dirty(scaled)
            return held
        if self.now.timestamp() - since < scaled.plan.get("down_delay", 0):
            return held
        scaled.memo.pop("below_since", None)
        self.dirty(scaled)
        return desired

    def autoscaler_status(self, scaled: ObjRow, load: float, wanted: int, desired: int) -> None:
        """What KEDA's HPA reports: desired replicas, the metric, and ScalingLimited past the ceiling."""
        hpa = {"desired": desired, "limited": wanted > scaled.plan["max"], "value": round(load, 3)}
        if scaled.memo.get("hpa") != hpa:
            scaled.memo["hpa"] = hpa
            self.dirty(scaled)

    def scaledobject_status(self, scaled: ObjRow, active: bool) -> None:
        last = scaled.memo.get("active_at")
        # KEDA refreshes lastActiveTime on every poll while active; the sandbox does it every
        # few minutes, which is enough to show it and saves rewriting every endpoint's row.
        fresh = last is not None and self.now.timestamp() - last < ACTIVE_REFRESH_SECONDS
        if scaled.memo.get("active") == active and (fresh or not active):
            return
        scaled.memo["active"] = active
        if active:
            scaled.memo["active_at"] = self.now.timestamp()
        self.dirty(scaled)
        so_status = {
            "scaleTargetKind": "apps/v1.Deployment",
            "scaleTargetGVKR": {"group": "apps", "version": "v1", "kind": "Deployment", "resource": "deployments"},
            "hpaName": f"keda-hpa-{scaled.name}",
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "ScaledObjectReady",
                 "message": "ScaledObject is defined correctly and is ready for scaling"},
                {"type": "Active", "status": "True" if active else "False",
                 "reason": "ScalerActive" if active else "ScalerNotActive",
                 "message": "Scaling is performed because triggers are active" if active
                 else "Scaling is not performed because triggers are not active"},
                {"type": "Fallback", "status": "False", "reason": "NoFallbackFound",
                 "message": "No fallbacks are active on this scaled object"},
            ],
        }
        last = scaled.status.get("lastActiveTime")
        if active:
            last = rfc3339(self.now)
        if last:
            so_status["lastActiveTime"] = last
        self.set_status(scaled, so_status)

    def deployment_pods(self, dep: ObjRow, desired: int, pods: list[PodRow]) -> None:
        plan = dep.plan["pods"][0]
        rs = replicaset_name(dep.name, plan["hash"])
        if desired != dep.replicas:
            verb = "up" if desired > dep.replicas else "down"
            self.event(dep, f"Deployment/{dep.name}", "Normal", "ScalingReplicaSet",
                       f"Scaled {verb} replica set {rs} from {dep.replicas} to {desired}")
            dep.replicas = desired
            self.dirty(dep)
        for pod in [p for p in pods if p.template_hash != plan["hash"]]:
            self.remove(pod, dep)  # the template changed: replace old pods
            pods.remove(pod)
        while len(pods) > desired:
            pod = max(pods, key=lambda p: (p.created_at, p.name))
            self.remove(pod, dep)
            pods.remove(pod)
        seq = int(dep.memo.get("seq", 0))
        for _ in range(desired - len(pods)):
            name = f"{rs}-{name_suffix(dep.uid, seq)}"
            if not self.create_pods(dep, [(0, 0, name)], f"ReplicaSet/{rs}"):
                break
            seq += 1
        if seq != dep.memo.get("seq", 0):
            dep.memo["seq"] = seq
            self.dirty(dep)
        live = [p for p in self.pods_by_owner.get(dep.pk, []) if p.active]
        ready = sum(1 for p in live if pod_ready(p, plan, self.now))
        status: dict[str, Any] = {"observedGeneration": dep.generation}
        if live:
            status["replicas"] = len(live)
            status["updatedReplicas"] = len(live)
        if ready:
            status["readyReplicas"] = ready
            status["availableReplicas"] = ready
        if len(live) - ready:
            status["unavailableReplicas"] = max(desired, len(live)) - ready
        available = ready >= desired - 1 if desired else True  # maxUnavailable 1
        # Progress = more ready replicas (or a new target); none for progressDeadlineSeconds
        # (600s by default) and the Deployment controller reports ProgressDeadlineExceeded.
        if "progress" not in dep.memo or ready > int(dep.memo.get("ready", 0)) or desired != dep.memo.get("desired"):
            dep.memo.update(progress=rfc3339(self.now), ready=ready, desired=desired)
            self.dirty(dep)
        elif ready < int(dep.memo.get("ready", 0)):
            dep.memo["ready"] = ready  # a replica went away: progress is measured from here
            self.dirty(dep)
        stalled = ready < desired and self.now - _parse(dep.memo["progress"]) > timedelta(seconds=PROGRESS_DEADLINE)
        if stalled:
            progressing = ("False", "ProgressDeadlineExceeded", f'ReplicaSet "{rs}" has timed out progressing.')
        elif ready >= desired:
            progressing = ("True", "NewReplicaSetAvailable", f'ReplicaSet "{rs}" has successfully progressed.')
        else:
            progressing = ("True", "ReplicaSetUpdated", f'ReplicaSet "{rs}" is progressing.')
        old = {c["type"]: c for c in dep.status.get("conditions") or []}
        conditions = [
            _dep_cond(old, "Available", "True" if available else "False",
                      "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                      "Deployment has minimum availability." if available
                      else "Deployment does not have minimum availability.", self.now),
            _dep_cond(old, "Progressing", *progressing, self.now),
        ]
        if dep.memo.get("failed_create"):
            conditions.append(_dep_cond(old, "ReplicaFailure", "True", "FailedCreate",
                                        dep.memo["failed_create"].removeprefix("Error creating: "), self.now))
        status["conditions"] = conditions
        self.set_status(dep, status)

    # -- 3. scheduler -------------------------------------------------------------------------------

    def schedule(self) -> None:
        used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        waiting: list[tuple[ObjRow, list[PodRow]]] = []
        for owner_id, pods in self.pods_by_owner.items():
            owner = self.owners[owner_id]
            unbound = []
            for pod in pods:
                if not pod.active:
                    continue
                if pod.node:
                    self._count(used[pod.node], self.plan_of(pod), +1)
                else:
                    unbound.append(pod)
            if not unbound:
                continue
            if owner.kind == "PyTorchJob":
                waiting.append((owner, unbound))  # a gang: all or nothing
            else:
                waiting.extend((owner, [pod]) for pod in unbound)
        scheduler = Scheduler(self.nodes, used)
        waiting.sort(key=lambda item: (item[1][0].created_at, item[0].pk, item[1][0].name))
        for owner, pods in waiting:
            chosen, message = scheduler.place([owner.plan["pods"][p.role] for p in pods])
            for i, pod in enumerate(pods):
                if chosen:
                    pod.node, pod.scheduled_at, pod.stage, pod.message = chosen[i], self.now, STAGE_BOUND, ""
                    ref = f"Pod/{pod.name}"
                    self.event(pod, ref, "Normal", "Scheduled",
                               f"Successfully assigned {pod.namespace}/{pod.name} to {chosen[i]}")
                    self.event(pod, ref, "Normal", "Pulling", f'Pulling image "{owner.plan["pods"][pod.role]["img"]}"')
                    self.touch(pod)
                elif pod.message != message:
                    pod.message = message
                    self.event(pod, f"Pod/{pod.name}", "Warning", "FailedScheduling", message)
                    self.touch(pod)

    # -- run ----------------------------------------------------------------------------------------

    def run(self) -> dict[str, int]:
        self.load()
        for owner_id, pods in self.pods_by_owner.items():
            owner = self.owners[owner_id]
            for pod in pods:
                self.advance(pod, owner)
        self.compute_usage()
        for owner in list(self.owners.values()):
            if owner.kind == "Job":
                self.job(owner)
            elif owner.kind == "PyTorchJob":
                self.pytorchjob(owner)
            else:
                self.deployment(owner)
        self.schedule()
        for namespace, quotas in self.quotas.items():
            for quota in quotas:
                used = {k: format_units(k.removeprefix("requests.").removeprefix("limits."),
                                        self.usage[namespace].get(k.removeprefix("requests.").removeprefix("limits."), 0))
                        for k in quota.plan.get("hard", {})}
                hard = {k: format_units(k.removeprefix("requests.").removeprefix("limits."), v)
                        for k, v in quota.plan.get("hard", {}).items()}
                self.set_status(quota, {"hard": hard, "used": used})
        return self.save()

    def save(self) -> dict[str, int]:
        if self.reset_owners:
            # Restarted gangs: their old pods go (the new ones reuse the names), before the inserts.
            SimPod.objects.filter(owner_id__in=self.reset_owners).delete()
            for pk in list(self.changed_pods):
                if self.changed_pods[pk].owner_id in self.reset_owners:
                    del self.changed_pods[pk]
        if self.deleted_pods:
            ids = list(self.deleted_pods)
            for i in range(0, len(ids), BATCH):
                SimPod.objects.filter(pk__in=ids[i:i + BATCH]).delete()
        fast_insert(SimPod, self.new_pods)
        fast_update(SimPod, list(self.changed_pods.values()),
                    ["node", "phase", "stage", "active", "scheduled_at", "started_at", "finished_at", "reason",
                     "exit_code", "message"])
        fast_update(SimObject, list(self.changed_objects.values()), ["status", "memo", "replicas", "done"])
        fast_insert(SimEvent, self.events)
        return {"pods_created": len(self.new_pods), "pods_changed": len(self.changed_pods),
                "objects_changed": len(self.changed_objects), "events": len(self.events)}


def endpoint_load(loads: dict[tuple[str, str], float], namespace: str, workload: str, scaled_plan: dict,
                  now: datetime) -> float:
    """The pinned load of an endpoint, else its default demo curve (a pure function of time)."""
    pinned = loads.get((namespace, workload))
    if pinned is not None:
        return pinned
    # Demo demand is scaled to what the endpoint may grow to, not to its current ceiling, so
    # burst beyond the ceiling is asked for (and granted or capped by the portal).
    return default_load(f"{namespace}/{workload}", scaled_plan["threshold"],
                        scaled_plan.get("user_max", scaled_plan["max"]), now)


def pod_ready(pod: PodRow, plan: dict, now: datetime) -> bool:
    """Running, past its readiness delay, and not a server that crashes."""
    if pod.phase != "Running" or pod.started_at is None or plan["out"] in CRASH_OUTCOMES:
        return False
    return now >= pod.started_at + timedelta(seconds=plan.get("ready", 0))


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _cond(type_: str, reason: str, message: str, now: datetime, status: str = "True") -> dict:
    stamp = rfc3339(now)
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastProbeTime": stamp, "lastTransitionTime": stamp}


def _dep_cond(old: dict[str, dict], type_: str, status: str, reason: str, message: str, now: datetime) -> dict:
    """A Deployment condition; its transition time holds while its status does."""
    previous = old.get(type_)
    since = previous["lastTransitionTime"] if previous and previous.get("status") == status else rfc3339(now)
    updated = previous.get("lastUpdateTime", since) if previous and previous.get("reason") == reason else rfc3339(now)
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastUpdateTime": updated,
            "lastTransitionTime": since}


def _has(conditions: list[dict], type_: str) -> bool:
    return any(c["type"] == type_ and c["status"] == "True" for c in conditions)


def _set_cond(conditions: list[dict], type_: str, status: str, reason: str, message: str, now: datetime) -> list[dict]:
    out = [c for c in conditions if c["type"] != type_]
    existing = next((c for c in conditions if c["type"] == type_), None)
    if existing is None and status == "False":
        return out
    cond = _cond(type_, reason, message, now, status)
    if existing and existing["status"] == status:
        cond["lastTransitionTime"] = existing.get("lastTransitionTime", cond["lastTransitionTime"])
    out.append(cond)
    return out


def new_uid() -> str:
    return str(uuid.uuid4())
