"""Generated names and uids of the sandbox's objects, shaped like the cluster's own.

Suffixes are a pure function of their parts (:func:`sandbox.simulation.stable_int`), so a pod
keeps its name across ticks and processes without storing it first.
"""

from __future__ import annotations

import uuid

from sandbox.simulation import stable_int

#: Kubernetes' alphabet for generated name suffixes (no vowels, no look-alikes).
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def name_suffix(*parts: object, length: int = 5) -> str:
    n = stable_int(*parts)
    out = []
    for _ in range(length):
        n, r = divmod(n, len(_ALPHABET))
        out.append(_ALPHABET[r])
    return "".join(out)


def replicaset_name(deployment: str, template_hash: str) -> str:
    return f"{deployment}-{name_suffix(template_hash, length=10)}"


def new_uid() -> str:
    return str(uuid.uuid4())
