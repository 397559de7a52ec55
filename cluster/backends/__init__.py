"""Cluster backends: the sandbox (embedded simulation) and the real Kubernetes API.

The interface lives in :mod:`cluster.backends.base`. Which backend a process uses is a
setting (``SLIPWAY_CLUSTER_BACKEND``) resolved by the Django side
(``core.backend.backend_for``), because this package must not import Django.
"""
