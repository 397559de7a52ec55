"""Pure builders from :mod:`cluster.specs` dataclasses to Kubernetes manifests (plain dicts): what every kind shares.

No Django, no ``kubernetes`` import, no clock, no randomness: the same spec always renders
the same objects, named from portal ids, so re-applying them is idempotent. Here: the pieces
every kind's pods and objects are made of (``common``), a workload's env Secret (``secrets``),
a team's namespace objects (``team``) and the device plugin's sharing configs
(``device_plugin``). A kind's own builders live in its app, on these pieces (its ``manifests``
module, which its registration's ``manifests`` calls).
"""

from __future__ import annotations

from cluster.manifests.common import dns_name, labels
from cluster.manifests.secrets import build_env_secret
from cluster.manifests.team import build_team, team_workload

__all__ = ["build_env_secret", "build_team", "dns_name", "labels", "team_workload"]
