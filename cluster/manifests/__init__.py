"""Pure builders from :mod:`cluster.specs` dataclasses to Kubernetes manifests (plain dicts).

No Django, no ``kubernetes`` import, no clock, no randomness: the same spec always renders
the same objects, named from portal ids, so re-applying them is idempotent.
"""

from __future__ import annotations

from cluster.manifests.common import dns_name, labels
from cluster.manifests.inference import build_endpoint
from cluster.manifests.secrets import build_env_secret
from cluster.manifests.team import build_team, team_workload
from cluster.manifests.training import build_training

__all__ = ["build_endpoint", "build_env_secret", "build_team", "build_training", "dns_name", "labels", "team_workload"]
