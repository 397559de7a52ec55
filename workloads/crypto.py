"""Encryption at rest of secret env values: Fernet tokens under the keys of ``SLIPWAY_SECRET_KEYS``.

A workload's secret values are stored as one Fernet token (AES-128-CBC with HMAC-SHA256,
authenticated) of their JSON (:class:`workloads.models.SecretEnv` ``sealed``), so the database
and its backups hold no plain value. The keys come from the environment, never the database:

* ``SLIPWAY_SECRET_KEYS`` is a comma-separated list of Fernet keys; the **first** encrypts and
  **every** one decrypts (:class:`~cryptography.fernet.MultiFernet`). Rotation: put a new key
  first, keep the old ones, run ``manage.py reseal_secret_env`` (:func:`reseal`), then drop the
  old keys (docs/security.md).
* Unset with DEBUG on, settings derive one key from ``SECRET_KEY`` (the demo); unset with DEBUG
  off there is none, and :func:`key_problems` (system check ``slipway.E001``) refuses to start.

Also :func:`digest`, the keyed hash of a set of values that the pod template carries so a
changed Secret rolls the Deployment without the value appearing anywhere.
"""

from __future__ import annotations

import json
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.crypto import salted_hmac

__all__ = ["InvalidToken", "digest", "key_problems", "reseal", "seal", "unseal"]


def key_problems(keys: list[str]) -> list[str]:
    """What is wrong with ``keys`` (empty when they are usable). Keys are named by position, never shown."""
    if not keys:
        return ["SLIPWAY_SECRET_KEYS is not set: with DEBUG off secret env values need a key of their own "
                "(docs/security.md says how to make one)."]
    problems = []
    for position, key in enumerate(keys, start=1):
        try:
            Fernet(key)
        except ValueError:
            problems.append(f"Key {position} of SLIPWAY_SECRET_KEYS is not a Fernet key (32 url-safe base64-encoded "
                            "bytes, as Fernet.generate_key() makes).")
    return problems


@lru_cache(maxsize=4)
def _cipher(keys: tuple[str, ...]) -> MultiFernet:
    problems = key_problems(list(keys))
    if problems:
        raise ImproperlyConfigured(" ".join(problems))
    return MultiFernet([Fernet(key) for key in keys])


def cipher() -> MultiFernet:
    """The keys of the settings as one cipher (cached per key list, so tests may override the setting)."""
    return _cipher(tuple(settings.SLIPWAY_SECRET_KEYS))


def seal(values: dict[str, str]) -> str:
    """``values`` as a Fernet token under the first key."""
    return cipher().encrypt(json.dumps(values, sort_keys=True).encode()).decode("ascii")


def unseal(token: str) -> dict[str, str]:
    """The values of ``token`` ("" — values forgotten — gives none). Raises InvalidToken under an unknown key."""
    if not token:
        return {}
    return json.loads(cipher().decrypt(token.encode("ascii")))


def reseal(token: str) -> str:
    """``token`` re-encrypted under the first key (the same token when it is empty)."""
    return cipher().rotate(token.encode("ascii")).decode("ascii") if token else token


def digest(values: dict[str, str]) -> str:
    """HMAC-SHA256 (keyed with SECRET_KEY) of ``values``: changes when any name or value does, reveals neither."""
    return salted_hmac("slipway.secret-env", json.dumps(values, sort_keys=True), algorithm="sha256").hexdigest()
