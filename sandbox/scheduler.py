"""A pure, in-memory model of kube-scheduler's filtering for the sandbox.

For each pending pod it runs the filters kube-scheduler runs, in its order, stopping at the
first one a node fails (TaintToleration, then NodeAffinity — nodeSelector and required node
affinity —, then NodeResourcesFit, then InterPodAffinity — the pod's required anti-affinity,
then the existing pods' —), and when no node passes it builds the same
``FailedScheduling`` message: ``0/8 nodes are available: 2 node(s) had untolerated taint
{nvidia.com/gpu: }, 6 Insufficient nvidia.com/gpu.`` (reason counts sorted as strings).

Required pod anti-affinity is honoured in general: any label selector (``In``, ``NotIn``,
``Exists``, ``DoesNotExist``) over the pods' labels, any topology key (nodes sharing the key's
value are one domain; a node without it is in none), and the namespaces a term looks in: those it
lists and those its ``namespaceSelector`` selects (``{}``: all), or — neither given — only the
pod's own namespace, as Kubernetes defaults. Required pod *affinity* is not simulated.

Nodes booked by a ProvisioningRequest (:mod:`sandbox.controllers.provisioning`) take only the pods whose
``autoscaling.x-k8s.io/consume-provisioning-request`` annotation names it, and those pods go nowhere else while
their request holds nodes; any other pod finds them :data:`BOOKED`.

A gang (the pods of one PyTorchJob or TrainJob) is placed all-or-nothing: every pod is tentatively bound
against the running totals, and nothing is kept unless all of them fit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
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


def selects(exprs: list | None, labels: dict[str, str]) -> bool:
    """A label selector compiled by :func:`sandbox.validation._selector_plan`: None selects nothing."""
    return exprs is not None and all(_expression_matches(labels, *expr) for expr in exprs)


def term_matches(term: dict, owner_namespace: str, namespace: str, labels: dict[str, str],
                 namespace_labels: dict[str, dict[str, str]]) -> bool:
    """Whether an anti-affinity ``term`` of a pod in ``owner_namespace`` selects a pod in ``namespace``
    labelled ``labels``."""
    if not selects(term["sel"], labels):
        return False
    if not term["ns"] and term["nss"] is None:
        return namespace == owner_namespace
    return namespace in term["ns"] or (term["nss"] is not None
                                       and selects(term["nss"], namespace_labels.get(namespace, {})))


def matches_node(plan: Plan, node: Node) -> bool:
    """nodeSelector (all pairs) and required node affinity (any term, all expressions)."""
    if any(node.labels.get(k) != v for k, v in plan["sel"].items()):
        return False
    terms = plan.get("aff") or []
    if not terms:
        return True
    return any(all(_expression_matches(node.labels, *expr) for expr in term) for term in terms)


#: InterPodAffinity's reasons: the pod's own anti-affinity, then an existing pod's.
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"


def filter_node(plan: Plan, node: Node, free: dict[str, int],
                inter_pod: Callable[[Node], str] | None = None) -> list[str]:
    """The reasons ``node`` cannot take the pod (empty: it fits). ``inter_pod``: InterPodAffinity's
    reason for the node ("" when it passes), asked only of nodes every earlier filter passes."""
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
    if reasons or inter_pod is None:
        return reasons
    why = inter_pod(node)
    return [why] if why else []


def failure_message(total_nodes: int, reasons: Iterable[str]) -> str:
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    histogram = sorted(f"{n} {reason}" for reason, n in counts.items())
    return f"0/{total_nodes} nodes are available: {', '.join(histogram)}."


#: The reason a node booked by a ProvisioningRequest gives a pod that does not consume that request (the sandbox's
#: words: a real cluster's scheduler does not know bookings, its autoscaler keeps them).
BOOKED = "node(s) were booked by another ProvisioningRequest"
#: The reason a node gives a pod whose ProvisioningRequest booked other nodes.
NOT_BOOKED = "node(s) were not booked by the pod's ProvisioningRequest"


#: A pod bound to a node, as anti-affinity sees it: (namespace, labels, its anti-affinity terms).
Placed = tuple[str, dict[str, str], list[dict]]


class Scheduler:
    """Binds pods against the nodes' free resources, updating them as it goes.

    ``free`` starts as allocatable minus the requests of pods already bound. Results for
    identical requirements are memoised until the next bind changes the free resources,
    so thousands of identical pending pods cost one evaluation.

    ``placed``: the pods bound to each node, for anti-affinity; None when no pod of the cluster
    has anti-affinity terms (then nothing needs them, and the pods bound here are not tracked).
    ``namespace_labels``: each namespace's labels, for terms with a ``namespaceSelector``.
    """

    def __init__(self, nodes: Sequence[Node], used: dict[str, dict[str, int]],
                 placed: dict[str, list[Placed]] | None = None,
                 namespace_labels: dict[str, dict[str, str]] | None = None,
                 booked: dict[str, str] | None = None) -> None:
        self.nodes = list(nodes)
        #: Node → the ProvisioningRequest (``<namespace>/<name>``) that booked it.
        self.booked = booked or {}
        self._holding = set(self.booked.values())
        self.free = {
            node.name: {r: node.allocatable.get(r, 0) - used.get(node.name, {}).get(r, 0)
                        for r in set(node.allocatable) | set(used.get(node.name, {}))}
            for node in self.nodes
        }
        self.placed = placed
        #: Of those, the pods that have anti-affinity terms (few): every pod is checked against them.
        self.holders = None if placed is None else {
            name: [pod for pod in pods if pod[2]] for name, pods in placed.items()}
        self.namespace_labels = namespace_labels or {}
        self._labels = {node.name: node.labels for node in self.nodes}
        self._domains: dict[tuple[str, str], list[str]] = {}
        self._closed: dict[tuple, frozenset[tuple[str, str]]] = {}
        self._keys: tuple[str, ...] | None = None
        self._failures: dict[str, str] = {}

    def _find(self, plan: Plan, free: dict[str, dict[str, int]],
              inter_pod: Callable[[Node], str] | None = None, namespace: str = "") -> tuple[str | None, list[str]]:
        reasons: list[str] = []
        claim = f"{namespace}/{plan['consume']}" if plan.get("consume") else None
        if claim not in self._holding:
            claim = None  # its request holds no node (none yet, or released): it goes where any pod may
        for node in self.nodes:
            if self.booked and self.booked.get(node.name) != claim:
                reasons.append(NOT_BOOKED if claim else BOOKED)
                continue
            why = filter_node(plan, node, free[node.name], inter_pod)
            if not why:
                return node.name, []
            reasons.extend(why)
        return None, reasons

    def _domain(self, key: str, value: str) -> list[str]:
        """The nodes of one topology domain (cached: the nodes do not change)."""
        if (key, value) not in self._domains:
            self._domains[key, value] = [node.name for node in self.nodes if node.labels.get(key) == value]
        return self._domains[key, value]

    def _closed_by_existing(self, plan: Plan, namespace: str,
                            holders: dict[str, list[Placed]]) -> frozenset[tuple[str, str]]:
        """The topology domains where an existing pod runs whose terms select this pod.

        Remembered per namespace and values of the labels the terms look at (thousands of pending
        pods are a handful of cases), until a pod with terms is bound.
        """
        labels = plan.get("lbl") or {}
        keys = self._term_keys(holders)
        case = (namespace, tuple(labels.get(key) for key in keys))
        if case not in self._closed:
            self._closed[case] = self._closing(labels, namespace, holders)
        return self._closed[case]

    def _term_keys(self, holders: dict[str, list[Placed]]) -> tuple[str, ...]:
        if self._keys is None:
            self._keys = tuple(sorted({expr[0] for pods in holders.values() for _, _, terms in pods
                                       for term in terms for expr in term["sel"] or ()}))
        return self._keys

    def _closing(self, labels: dict[str, str], namespace: str,
                 holders: dict[str, list[Placed]]) -> frozenset[tuple[str, str]]:
        closed = set()
        for node_name, pods in holders.items():
            node_labels = self._labels.get(node_name, {})
            for ns, _, terms in pods:
                for term in terms:
                    value = node_labels.get(term["topo"])
                    if value is not None and term_matches(term, ns, namespace, labels, self.namespace_labels):
                        closed.add((term["topo"], value))
        return frozenset(closed)

    def _inter_pod(self, plan: Plan, namespace: str, placed: dict[str, list[Placed]],
                   closed: frozenset[tuple[str, str]]) -> Callable[[Node], str]:
        """InterPodAffinity's filter for one pod: its own terms first (does a pod they select run in
        the node's domain?), then the existing pods' (is the node in a domain they close to it?)."""
        terms = plan.get("anti") or ()

        def reason(node: Node) -> str:
            for term in terms:
                value = node.labels.get(term["topo"])
                if value is not None and any(
                        term_matches(term, namespace, ns, labels, self.namespace_labels)
                        for name in self._domain(term["topo"], value) for ns, labels, _ in placed.get(name, ())):
                    return ANTI_AFFINITY
            if any(node.labels.get(key) == value for key, value in closed):
                return EXISTING_ANTI_AFFINITY
            return ""

        return reason

    def place(self, plans: Sequence[Plan], namespace: str = "") -> tuple[list[str] | None, str]:
        """Bind one pod per plan (pods of ``namespace``), all or nothing. Returns (node names, "")
        or (None, message)."""
        placed, holders = self.placed, self.holders
        gang = len(plans) > 1
        # Who the pod is matters only where anti-affinity is in play (its terms, or an existing pod's).
        # A pod without terms of its own then fares as any other that the same domains are closed to.
        inter = placed is not None and (any(p.get("anti") for p in plans) or any(holders.values()))
        closed = self._closed_by_existing(plans[0], namespace, holders) if inter and not gang else frozenset()
        who: object = ()
        if inter:
            who = ([namespace, [(p.get("lbl"), p.get("anti")) for p in plans]] if gang or plans[0].get("anti")
                   else sorted(closed))
        key = repr(([(p["req"], p["sel"], p["tol"], p["aff"], p.get("consume")) for p in plans], who,
                    namespace if any(p.get("consume") for p in plans) else ""))
        if key in self._failures:
            return None, self._failures[key]
        trial = {name: dict(free) for name, free in self.free.items()} if gang else self.free
        if placed is not None and gang:
            placed = {name: list(pods) for name, pods in placed.items()}
            holders = {name: list(pods) for name, pods in holders.items()}
        chosen: list[str] = []
        for plan in plans:
            inter_pod = None
            if inter:
                if gang:  # against the trial, with the gang's earlier pods placed (not remembered)
                    closed = self._closing(plan.get("lbl") or {}, namespace, holders)
                inter_pod = self._inter_pod(plan, namespace, placed, closed)
            node, reasons = self._find(plan, trial, inter_pod, namespace)
            if node is None:
                message = failure_message(len(self.nodes), reasons)
                self._failures[key] = message
                return None, message
            chosen.append(node)
            if gang:
                _take(trial[node], plan["req"])
            if placed is not None:
                pod = (namespace, plan.get("lbl") or {}, plan.get("anti") or [])
                placed.setdefault(node, []).append(pod)
                if pod[2]:
                    holders.setdefault(node, []).append(pod)
        if not gang:
            _take(self.free[chosen[0]], plans[0]["req"])
        else:
            self.free, self.placed, self.holders = trial, placed, holders
        if any(plan.get("anti") for plan in plans):
            self._closed, self._keys = {}, None  # new rules: what they close is not known yet
        self._failures.clear()  # free capacity changed: earlier verdicts may no longer hold
        return chosen, ""


def _take(free: dict[str, int], requests: dict[str, int]) -> None:
    free["pods"] = free.get("pods", 0) - 1
    for resource, amount in requests.items():
        free[resource] = free.get(resource, 0) - amount
