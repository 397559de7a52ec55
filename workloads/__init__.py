"""What every kind of GPU workload shares (docs/design.md "Layers", "The flow of one request").

Training runs, inference endpoints and workspaces are *kinds*, each an app of its own: each registers
itself in :mod:`workloads.registry` (its model, manifest builder, status mapping and quota
request), and the machinery here — admission hand-off, the apply/delete tasks, the reconcile
cycle, billing, ending and failing — works on any kind through that registry. This app never
imports a kind's app.

"Kind" here is always a workload kind; the Kubernetes kinds a workload creates are resource kinds
(:class:`cluster.backends.base.ResourceKind`). These and the other words the app uses — active,
holding, attempt, preview, reason code — are defined once in docs/glossary.md.
"""
