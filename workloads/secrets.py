"""Secret env of a workload: stored apart, referenced from the pods, shown masked.

A workload's ``secret_env`` (docs/api.md) is written with the workload to
:class:`workloads.models.SecretEnv`, its values encrypted (:mod:`workloads.crypto`); an
endpoint's PATCH replaces the whole set (:func:`replace`). From there:

* the manifests name the variables only (``valueFrom.secretKeyRef``, see
  :mod:`cluster.manifests.secrets`), so the manifest view and the API's ``manifest/`` show no value;
* the apply task builds the Secret ``<object name>-env`` in the team's namespace from the stored
  values (:func:`env_secret`) and hands it to the backend, before the workload's own objects;
* the backend's ``delete`` removes that Secret with the workload's objects (by name: Slipway may
  not list Secrets);
* pages and API responses show ``NAME: ••••••`` (:func:`masked`), never a value;
* an endpoint's pod template carries the values' keyed digest (:func:`reference`), so replacing
  them rolls its Deployment.
"""

from __future__ import annotations

from cluster.manifests import build_env_secret
from cluster.manifests.common import Manifest
from workloads import crypto
from workloads.constants import SECRET_MASK
from workloads.models import SecretEnv


def store(workload, pairs: tuple[tuple[str, str], ...], hidden: tuple[tuple[str, str], ...] = ()) -> None:
    """Record ``workload``'s secret env (in the caller's transaction, the one recording the workload).

    The instance keeps the names (``stored_secret_names``), so the response to the request
    that created it shows them without reading them back. ``hidden``: values Slipway puts in the
    same Secret for itself (a run's token), sealed like the others but not among the names the
    user sees; the pods reference them by their own manifests.
    """
    workload.stored_secret_names = tuple(sorted(name for name, _ in pairs))
    if pairs or hidden:
        values = {**dict(pairs), **dict(hidden)}
        workload.stored_secret_digest = crypto.digest(values)
        SecretEnv.objects.create(ref=workload.ref, team=workload.team, names=list(workload.stored_secret_names),
                                 sealed=crypto.seal(values), digest=workload.stored_secret_digest)
    else:
        workload.stored_secret_digest = ""


def replace(workload, pairs: tuple[tuple[str, str], ...]) -> None:
    """Replace ``workload``'s whole secret env by ``pairs`` (names and values; none removes them all).

    The row stays even when empty, so the next apply overwrites the Secret with no keys rather
    than leaving the old values in the cluster until the workload ends.
    """
    values = dict(pairs)
    workload.stored_secret_names = tuple(sorted(values))
    workload.stored_secret_digest = crypto.digest(values)
    SecretEnv.objects.update_or_create(
        ref=workload.ref,
        defaults={"team": workload.team, "names": list(workload.stored_secret_names),
                  "sealed": crypto.seal(values), "digest": workload.stored_secret_digest})


def seal_apart(ref: str, team, pairs: tuple[tuple[str, str], ...]) -> None:
    """Record secret env that no workload holds yet, under ``ref`` (a sweep's, ``sweep:12``, for the trials it will
    launch), sealed like a workload's: key rotation (:func:`reseal_all`) re-encrypts it with the others."""
    values = dict(pairs)
    SecretEnv.objects.create(ref=ref, team=team, names=sorted(values), sealed=crypto.seal(values),
                             digest=crypto.digest(values))


def unsealed(ref: str) -> tuple[tuple[str, str], ...]:
    """The (name, value) pairs stored under ``ref`` (none: nothing stored, or its values were dropped)."""
    sealed = SecretEnv.objects.filter(ref=ref).values_list("sealed", flat=True).first()
    return tuple(sorted(crypto.unseal(sealed).items())) if sealed else ()


def drop(ref: str) -> None:
    """Delete what is stored under ``ref``, names and values (its owner is deleted)."""
    SecretEnv.objects.filter(ref=ref).delete()


def names(workload) -> tuple[str, ...]:
    """The sorted names of ``workload``'s secret env (one query unless it was stored through this instance)."""
    if workload.stored_secret_names is not None:
        return workload.stored_secret_names
    found = SecretEnv.objects.filter(ref=workload.ref).values_list("names", flat=True).first()
    return tuple(found or ())


def names_by_ref(workloads) -> dict[str, tuple[str, ...]]:
    """``ref -> sorted names`` of the secret env of ``workloads`` that have one (at most one query)."""
    found = {w.ref: w.stored_secret_names for w in workloads if w.stored_secret_names}
    unknown = [w.ref for w in workloads if w.stored_secret_names is None]
    if unknown:
        found.update(SecretEnv.objects.filter(ref__in=unknown).values_list("ref", "names"))
    return found


def reference(workload) -> tuple[tuple[str, ...], str]:
    """``(sorted names, digest)`` of ``workload``'s secret env: what its manifests show of it.

    One query, unless this instance stored them (or a test set them on an unsaved workload).
    """
    if workload.stored_secret_names is not None and workload.stored_secret_digest is not None:
        return workload.stored_secret_names, workload.stored_secret_digest
    row = SecretEnv.objects.filter(ref=workload.ref).values_list("names", "digest").first()
    return (tuple(row[0]), row[1]) if row else ((), "")


def forget_values(ref: str) -> None:
    """Drop the values of ``ref``'s secret env, keeping the names (the workload has ended)."""
    SecretEnv.objects.filter(ref=ref).update(sealed="")


def reseal_all() -> int:
    """Re-encrypt every stored value under the first key of ``SLIPWAY_SECRET_KEYS`` (key rotation).

    Each row is written only if it still holds the token read, so a PATCH landing meanwhile
    keeps its new values (already under the first key). Returns the number of rows re-encrypted.
    """
    done = 0
    for pk, token in SecretEnv.objects.exclude(sealed="").values_list("pk", "sealed").iterator():
        done += SecretEnv.objects.filter(pk=pk, sealed=token).update(sealed=crypto.reseal(token))
    return done


def masked(names_: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``{NAME: "••••••"}``: how every page and API response shows secret env."""
    return dict.fromkeys(names_, SECRET_MASK)


def env_secret(workload) -> Manifest | None:
    """The Secret to apply for ``workload`` (None without secret env). For the apply task only."""
    row = SecretEnv.objects.filter(ref=workload.ref).only("sealed").first()
    if row is None:
        return None
    return build_env_secret(workload.namespace, workload.team.slug, workload.object_name,
                            tuple(sorted(crypto.unseal(row.sealed).items())))
