"""The apps import one way: each top-level package only imports packages in layers below it
(docs/design.md "Layers"). Peers in one layer (the workload kinds; the sandbox and teams) never import
each other, so adding a kind cannot tie it to another. Function-level imports count
(:mod:`tests.test_import_cycles` walks them).

The kinds' layer is read from the kind registry (:func:`kind_packages`), so a new kind is placed
without a touch here.
"""

from __future__ import annotations

import ast

from tests.test_import_cycles import PACKAGES, REPO, graph
from workloads.registry import kinds


def kind_packages() -> tuple[str, ...]:
    """The top-level packages of the project's registered kinds (the test-only kind under tests/ excluded)."""
    packages = {kind.model._meta.app_config.name.split(".")[0] for kind in kinds()}
    return tuple(sorted(packages - {"tests"}))


KINDS = kind_packages()

#: Bottom up. A package may import any package of a lower layer, none of its own or a higher one.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("slipway",),            # the command line and Python client: HTTP to the API only, no project package
    ("cluster",),            # Kubernetes layer, Django-free
    ("core",),               # shared plumbing every app needs and no app owns
    ("sandbox", "teams"),    # the simulated cluster (cluster's interface); teams, membership, tokens, audit, the team lock
    ("fleet",),              # the hardware as data: clusters (their state, their backends) and GPU flavors
    ("billing",),            # prices, quota holds and their open segments, the ledger, budgets, reports
    ("quotas",),             # capacity: quotas, cohorts, sharing, the queue, admission, fair share, reclaim
    ("workloads",),          # what every workload kind shares
    KINDS,                   # the workload kinds, from the registry
    # GPU time by the calendar (docs/reservations.md); hyperparameter search over the team's runs (docs/sweeps.md)
    ("reservations", "sweeps"),
    ("notifications", "gateway"),  # e-mail and webhooks about the work below; the gateway (data plane)
    ("front",),              # pages that span kinds
    ("portal",),             # the project package: wiring only
)


#: Admission's modules, bottom up (docs/architecture.md): the pure rule, the facts it is given, the
#: read-only queue, the lock and the writes. Each imports only those before it.
ADMISSION = ("quotas.decide", "quotas.facts", "quotas.queue", "quotas.admission")

#: All the pure rule imports of the project: the reason shape, the admission codes, the priorities, money's
#: zero and words, and the budget's own rule (itself pure: it imports only money's zero).
PURE_RULE_IMPORTS = {"cluster.reasons", "quotas.constants", "core.priority", "core.money", "core.formatting",
                     "billing.budget_rule"}


def layer_of() -> dict[str, int]:
    return {package: depth for depth, layer in enumerate(LAYERS) for package in layer}


def package_edges() -> dict[tuple[str, str], str]:
    """``{(importer package, imported package): one example "module -> module"}`` across packages."""
    edges, _lazy = graph()
    found: dict[tuple[str, str], str] = {}
    for module, targets in edges.items():
        for target in targets:
            pair = (module.split(".")[0], target.split(".")[0])
            if pair[0] != pair[1]:
                found.setdefault(pair, f"{module} -> {target}")
    return found


def violations(found: dict[tuple[str, str], str], depth: dict[str, int]) -> list[str]:
    return sorted(f"{example} ({a} may not import {b})" for (a, b), example in found.items()
                  if depth[b] >= depth[a])


def test_every_package_has_a_layer():
    assert set(layer_of()) == set(PACKAGES)
    assert len(KINDS) >= 2 and set(KINDS) <= set(PACKAGES)


def test_packages_import_only_layers_below_them():
    found = package_edges()
    assert ("front", "workloads") in found and ("workloads", "quotas") in found  # the walk sees imports
    assert violations(found, layer_of()) == []


def test_it_reports_an_upward_or_sideways_import():
    depth = layer_of()
    one, other = KINDS[:2]
    found = {("quotas", "workloads"): "quotas.views -> workloads.services",
             (one, other): f"{one}.x -> {other}.y", ("front", one): f"front.views -> {one}.models"}
    assert violations(found, depth) == [
        f"{one}.x -> {other}.y ({one} may not import {other})",
        "quotas.views -> workloads.services (quotas may not import workloads)",
    ]


def test_the_pages_spanning_kinds_name_no_kind():
    """A kind reaches front's pages (nav, dashboard, staff list) only through what it registers
    (``workloads.registry``), so adding one touches its own app, settings and URLs. The demo
    seed command is the exception: it seeds each kind's demo data."""
    edges, _lazy = graph()
    named = sorted(f"{module} -> {target}" for module, targets in edges.items() for target in targets
                   if module.startswith("front.") and not module.startswith("front.management.")
                   and target.split(".")[0] in KINDS)
    assert named == []


def test_admissions_modules_import_one_way():
    edges, _lazy = graph()
    for depth, module in enumerate(ADMISSION):
        assert edges[module] & set(ADMISSION) <= set(ADMISSION[:depth]), module


def test_the_admission_rule_imports_no_database():
    """``decide()`` stays the one pure rule (docs/design.md "Sharing, preemption, clusters"): :mod:`quotas.decide` imports neither the
    ORM nor a module that reads or writes (the models, the ledger, the facts, admission), so a
    replay asks the very rule the portal admits by."""
    edges, _lazy = graph()
    assert edges["quotas.decide"] <= PURE_RULE_IMPORTS
    assert edges["billing.budget_rule"] <= {"core.money"}
    tree = ast.parse((REPO / "quotas" / "decide.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert sorted(name for name in imported if name.split(".")[0] == "django") == []


#: The one receiver of another app's model signal (docs/architecture.md "Upward: signals"): a membership
#: goes by every path (removed, or by cascade with its user or team), and each must close the leaver's
#: way into the team's workspaces.
MODEL_SIGNAL_RECEIVERS = {("teams.Membership", "post_delete", "workspaces.services.member_left")}


def model_signal_receivers() -> set[tuple[str, str, str]]:
    """``(model, signal, receiver)`` for every project receiver of a model signal sent by another
    package's model (Django's and third-party receivers are not the project's)."""
    from django.apps import apps
    from django.db.models import signals

    found = set()
    for name in ("pre_save", "post_save", "pre_delete", "post_delete", "m2m_changed"):
        signal = getattr(signals, name)
        for model in apps.get_models():
            live = signal._live_receivers(model)
            receivers = live[0] + live[1] if isinstance(live, tuple) else live  # Django 5: (sync, async)
            for receiver in receivers:
                module = getattr(receiver, "__module__", "") or ""
                package = module.split(".")[0]
                if package in PACKAGES and package != model.__module__.split(".")[0]:
                    owner = f"{model.__module__.split('.')[0]}.{model.__name__}"
                    found.add((owner, name, f"{module}.{receiver.__qualname__}"))
    return found


def test_no_app_acts_on_another_apps_rows_saved_only_on_its_signals():
    assert model_signal_receivers() == MODEL_SIGNAL_RECEIVERS
