"""A workload's secret env: the Secret holding the values, and the pod env entries that reference it.

The values never appear in the workload's own manifests (what the portal's manifest view and
the API show): its containers carry ``valueFrom.secretKeyRef`` entries naming the Secret and a
key, and the Secret itself is built only by the apply task, which hands it to the backend's
``apply_secret`` (never shown, never read back).
"""

from __future__ import annotations

import base64

from cluster.backends.base import env_secret_name
from cluster.manifests.common import Manifest, metadata

#: On a pod template: the keyed digest of the secret env values. A Secret's change alone does not
#: restart pods (env is read at start), so replaced values change this and the Deployment rolls
#: (an endpoint's replaced secret env, a workspace's rotated Jupyter token).
SECRET_ENV_DIGEST_ANNOTATION = "slipway.dev/secret-env-digest"


def build_env_secret(namespace: str, team: str, object_name: str, values: tuple[tuple[str, str], ...]) -> Manifest:
    """The ``Opaque`` Secret ``<object_name>-env`` with one key per variable.

    ``data`` (base64) rather than ``stringData``: server-side apply owns the fields it sends,
    and the API server rewrites ``stringData`` into ``data``, so a key removed from a
    ``stringData`` apply would linger.
    """
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(env_secret_name(object_name), namespace, team, object_name),
        "type": "Opaque",
        "data": {name: base64.b64encode(value.encode()).decode("ascii") for name, value in values},
    }


def secret_env_refs(object_name: str, names: tuple[str, ...]) -> list[Manifest]:
    """Container env entries taking each of ``names`` from the workload's env Secret."""
    secret = env_secret_name(object_name)
    return [{"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": name}}} for name in names]
