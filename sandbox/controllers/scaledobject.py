"""KEDA's ScaledObject and the HPA it drives: the replica target of a Deployment from its
endpoint's load (pinned with ``manage.py sandbox load``, else its trigger's figure — what the gateways
see of it for the gateway's metrics, its engines' traffic for the others —, else a demo curve), held
within the ScaledObject's bounds with the HPA's scale-down stabilization, and the two objects' statuses.

An endpoint that may sleep at zero has the gateway's wake-up trigger (``plan["wake"]``, its
``activationThreshold``): requests held at the gateways above it make the ScaledObject active, and an
endpoint at zero gets its first replica on that tick, whatever its own metric says — as KEDA scales a
ScaledObject from ``minReplicaCount`` 0 to one when a trigger activates.

What the gateways see comes from the backend's ``demand`` reader (:attr:`cluster.backends.base.ClusterBackend.demand`,
handed down from the serving app: the sandbox imports nothing above core), read once a tick for every
autoscaled Deployment, and only when one of them needs it.
"""

from __future__ import annotations

from datetime import datetime

from cluster.backends.base import ClusterAddress, EndpointDemand
from sandbox import engines
from sandbox.simulation import default_load, wanted_replicas
from sandbox.timestamps import rfc3339
from sandbox.world import ObjRow, World

ACTIVE_REFRESH_SECONDS = 300
#: The gateway's triggers (their names in the ScaledObject) and their figure of an endpoint's demand.
GATEWAY_FIGURES = {
    "gateway-in-flight": lambda demand: float(demand.in_flight),
    "gateway-requests-per-second": lambda demand: demand.requests_per_second,
}


def replica_target(world: World, scaled: ObjRow, dep: ObjRow) -> int:
    """How many replicas the HPA asks of ``dep`` this tick; updates the ScaledObject's status on the way."""
    sp = scaled.plan
    gateway = sp.get("metric") in GATEWAY_FIGURES
    demand = gateway_demand(world, dep) if gateway or "wake" in sp else None
    if gateway:
        traffic = GATEWAY_FIGURES[sp["metric"]](demand) if demand is not None else None
    else:
        traffic = engines.traffic(world, dep, sp)
    load = endpoint_load(world.loads, dep.namespace, dep.workload, sp, world.now, traffic)
    wanted = wanted_replicas(load, sp["threshold"], sp["min"])
    woken = "wake" in sp and demand is not None and demand.held > sp["wake"]
    if woken:
        wanted = max(wanted, 1)  # the wake-up trigger is active: KEDA scales from zero to one
    desired = stabilized(world, scaled, dep, min(max(wanted, sp["min"]), sp["max"]))
    scaledobject_status(world, scaled, load > 0 or woken)
    autoscaler_status(world, scaled, load, wanted, desired)
    return desired


def gateway_demand(world: World, dep: ObjRow) -> EndpointDemand | None:
    """What the gateways see of ``dep``'s endpoint (nothing seen: no demand); None when the backend was handed no
    reader. The first call of a tick reads every autoscaled Deployment's at once."""
    if world.demand_reader is None:
        return None
    if world.demand is None:
        addresses = [ClusterAddress(owner.namespace, owner.workload) for owner in world.owners.values()
                     if owner.resource_kind == "Deployment" and (owner.namespace, owner.name) in world.scaled]
        world.demand = world.demand_reader(addresses)
    return world.demand.get(ClusterAddress(dep.namespace, dep.workload), EndpointDemand())


def endpoint_load(loads: dict[tuple[str, str], float], namespace: str, workload: str, scaled_plan: dict,
                  now: datetime, traffic: float | None = None) -> float:
    """The pinned load of an endpoint, else what its engines serve (``traffic``, the trigger's figure from
    their last scrape: :func:`sandbox.engines.traffic`), else its default demo curve (a pure function of time)."""
    pinned = loads.get((namespace, workload))
    if pinned is not None:
        return pinned
    if traffic is not None:
        return traffic
    # Demo demand is scaled to what the endpoint may grow to, not to its current ceiling, so
    # burst beyond the ceiling is asked for (and granted or capped by the portal).
    return default_load(f"{namespace}/{workload}", scaled_plan["threshold"],
                        scaled_plan.get("user_max", scaled_plan["max"]), now)


def stabilized(world: World, scaled: ObjRow, dep: ObjRow, desired: int) -> int:
    """The HPA's scale-down stabilization: fewer replicas only once wanted for ``down_delay`` seconds.

    Except above the ScaledObject's ``maxReplicaCount`` (it was lowered): as Kubernetes' HPA
    does ("Current number of replicas above Spec.MaxReplicas"), those go at once, with no
    stabilization; the window applies from the maximum down.
    """
    held = min(dep.replicas, scaled.plan["max"])
    if desired >= held:
        if scaled.memo.pop("below_since", None) is not None:
            world.dirty(scaled)
        return desired
    since = scaled.memo.get("below_since")
    if since is None:
        scaled.memo["below_since"] = world.now.timestamp()
        world.dirty(scaled)
        return held
    if world.now.timestamp() - since < scaled.plan.get("down_delay", 0):
        return held
    scaled.memo.pop("below_since", None)
    world.dirty(scaled)
    return desired


def autoscaler_status(world: World, scaled: ObjRow, load: float, wanted: int, desired: int) -> None:
    """What KEDA's HPA reports: desired replicas, the metric, and ScalingLimited past the ceiling."""
    hpa = {"desired": desired, "limited": wanted > scaled.plan["max"], "value": round(load, 3)}
    if scaled.memo.get("hpa") != hpa:
        scaled.memo["hpa"] = hpa
        world.dirty(scaled)


def scaledobject_status(world: World, scaled: ObjRow, active: bool) -> None:
    last = scaled.memo.get("active_at")
    # KEDA refreshes lastActiveTime on every poll while active; the sandbox does it every
    # few minutes, which is enough to show it and saves rewriting every endpoint's row.
    fresh = last is not None and world.now.timestamp() - last < ACTIVE_REFRESH_SECONDS
    if scaled.memo.get("active") == active and (fresh or not active):
        return
    scaled.memo["active"] = active
    if active:
        scaled.memo["active_at"] = world.now.timestamp()
    world.dirty(scaled)
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
        last = rfc3339(world.now)
    if last:
        so_status["lastActiveTime"] = last
    world.set_status(scaled, so_status)
