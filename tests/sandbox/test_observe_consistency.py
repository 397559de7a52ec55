"""observe() reads the simulated cluster in several statements: what another process changes
between them must not leave an object half seen."""

from __future__ import annotations

from django.db import connection

from sandbox import backend as sandbox_backend
from sandbox.models import SimObject
from tests.sandbox.helpers import at, endpoint, ref, team_objects
from workloads.registry import resource_kinds


def test_an_object_changed_or_deleted_between_observes_two_reads_is_never_half_seen(backend):
    """observe() reads the objects, then the manifests it has not cached: another process's apply
    in between moves an object to a newer version, a delete removes it. Neither may leave an
    object without its manifest (it was observed as ``{}`` and the status mapping raised)."""
    backend.apply(team_objects() + endpoint("ep-1") + endpoint("ep-2"), resource_kinds(), now=at(0))
    backend.tick(at(0))
    sandbox_backend._MANIFESTS.clear()  # a fresh worker: nothing cached yet
    changed = SimObject.objects.get(namespace=ref("ep-1").namespace, name="ep-1", resource_kind="Deployment")
    deleted = SimObject.objects.get(namespace=ref("ep-2").namespace, name="ep-2", resource_kind="Deployment")
    selects = []

    def between_the_reads(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql.lstrip().upper().startswith("SELECT") and SimObject._meta.db_table in sql:
            selects.append(sql)
            if len(selects) == 1:  # right after the first read of the objects
                SimObject.objects.filter(pk=changed.pk).update(resource_version=changed.resource_version + 1)
                SimObject.objects.filter(pk=deleted.pk).delete()
        return result

    with connection.execute_wrapper(between_the_reads):
        seen = {w.object_name: w for w in backend.observe(resource_kinds(), now=at(1))}
    assert len(selects) >= 2  # the second read happened after the change
    assert seen["ep-1"].first("Deployment")["metadata"]["name"] == "ep-1"
    assert all(obj.get("kind") for w in seen.values() for obj in w.objects)
