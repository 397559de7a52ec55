"""A pure, in-memory model of kube-scheduler's filtering for the sandbox.

For each pending pod it runs the filters kube-scheduler runs, in its order, stopping at the
first one a node fails (TaintToleration, then NodeAffinity — nodeSelector and required node
affinity —, then NodeResourcesFit), and when no node passes it builds the same
``FailedScheduling`` message: ``0/8 nodes are available: 2 node(s) had untolerated taint
{nvidia.com/gpu: }, 6 Insufficient nvidia.com/gpu.`` (reason counts sorted as strings).

A gang (the pods of one PyTorchJob) is placed all-or-nothing: every pod is tentatively bound
against the running totals, and nothing is kept unless all of them fit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sandbox.inventory import Node

Plan = dict[str, Any]

TAINT_EFFECTS = ("NoSchedule", "NoExecute")  # PreferNoSchedule never blocks a pod


def tolerates(tolerations: Iterable[Sequence[str]], taint: tuple[str, str, str]) -> bool:
    key, value, effect = taint
    for t_key, operator, t_value, t_effect in tolerations:
        if t_effect and t_effect != effect:
            continue
        if operator == "Exists":
            if not t_key or t_key == key:
                return True
        elif t_key == key and (t_value or "") == value:
            return True
    return False


def _expression_matches(labels: dict[str, str], key: str, operator: str, values: list[str]) -> bool:
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            left, right = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def matches_node(plan: Plan, node: Node) -> bool:
    """nodeSelector (all pairs) and required node affinity (any term, all expressions)."""
    if any(node.labels.get(k) != v for k, v in plan["sel"].items()):
        return False
    terms = plan.get("aff") or []
    if not terms:
        return True
    return any(all(_expression_matches(node.labels, *expr) for expr in term) for term in terms)


def filter_node(plan: Plan, node: Node, free: dict[str, int]) -> list[str]:
    """The reasons ``node`` cannot take the pod (empty: it fits)."""
    for taint in node.taints:
        if taint[2] in TAINT_EFFECTS and not tolerates(plan["tol"], taint):
            return [f"node(s) had untolerated taint {{{taint[0]}: {taint[1]}}}"]
    if not matches_node(plan, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    reasons = []
    if free.get("pods", 0) < 1:
        reasons.append("Too many pods")
    for resource, amount in sorted(plan["req"].items()):
        if amount > 0 and free.get(resource, 0) < amount:
            reasons.append(f"Insufficient {resource}")
    return reasons


def failure_message(total_nodes: int, reasons: Iterable[str]) -> str:
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    histogram = sorted(f"{n} {reason}" for reason, n in counts.items())
    return f"0/{total_nodes} nodes are available: {', '.join(histogram)}."


class Scheduler:
    """Binds pods against the nodes' free resources, updating them as it goes.

    ``free`` starts as allocatable minus the requests of pods already bound. Results for
    identical requirements are memoised until the next bind changes the free resources,
    so thousands of identical pending pods cost one evaluation.
    """

    def __init__(self, nodes: Sequence[Node], used: dict[str, dict[str, int]]) -> None:
        self.nodes = list(nodes)
        self.free = {
            node.name: {r: node.allocatable.get(r, 0) - used.get(node.name, {}).get(r, 0)
                        for r in set(node.allocatable) | set(used.get(node.name, {}))}
            for node in self.nodes
        }
        self._failures: dict[str, str] = {}

    def _find(self, plan: Plan, free: dict[str, dict[str, int]]) -> tuple[str | None, list[str]]:
        reasons: list[str] = []
        for node in self.nodes:
            why = filter_node(plan, node, free[node.name])
            if not why:
                return node.name, []
            reasons.extend(why)
        return None, reasons

    def place(self, plans: Sequence[Plan]) -> tuple[list[str] | None, str]:
        """Bind one pod per plan, all or nothing. Returns (node names, "") or (None, message)."""
        key = repr([(p["req"], p["sel"], p["tol"], p["aff"]) for p in plans])
        if key in self._failures:
            return None, self._failures[key]
        trial = {name: dict(free) for name, free in self.free.items()} if len(plans) > 1 else self.free
        chosen: list[str] = []
        for plan in plans:
            node, reasons = self._find(plan, trial)
            if node is None:
                message = failure_message(len(self.nodes), reasons)
                self._failures[key] = message
                return None, message
            chosen.append(node)
            if len(plans) > 1:
                _take(trial[node], plan["req"])
        if len(plans) == 1:
            _take(self.free[chosen[0]], plans[0]["req"])
        else:
            self.free = trial
        self._failures.clear()  # free capacity changed: earlier verdicts may no longer hold
        return chosen, ""


def _take(free: dict[str, int], requests: dict[str, int]) -> None:
    free["pods"] = free.get("pods", 0) - 1
    for resource, amount in requests.items():
        free[resource] = free.get(resource, 0) - amount
