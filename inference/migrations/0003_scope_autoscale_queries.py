"""Confine the autoscale queries stored before the tenant rule (issue 21) to their team's namespace.

Each live endpoint that scales on ``metric: prometheus`` gets the query
:func:`cluster.promql.scope_query` makes of it (the team's namespace matcher on every selector,
canonical form), as if it had been submitted now. A query the rule refuses — it reads another
namespace, or is a load lever — cannot run any more (the builder would refuse to render it):
that endpoint falls back to ``requests_per_second`` with the same target, which still wakes it
from zero, and a warning names it so its team can write a query that passes. The cluster's
ScaledObjects take the stored query at their endpoint's next apply; the builder scopes the query
it renders either way.
"""

import logging

from django.db import migrations

from cluster.promql import QueryRefused, scope_query

logger = logging.getLogger("inference")

ENDED_STATES = ("deleted", "failed")


def scope_stored_queries(apps, schema_editor):
    endpoint_model = apps.get_model("inference", "InferenceEndpoint")
    endpoints = (endpoint_model.objects.filter(autoscale__metric="prometheus").exclude(state__in=ENDED_STATES)
                 .select_related("team"))
    for endpoint in endpoints.iterator():
        autoscale = dict(endpoint.autoscale)
        try:
            autoscale["query"] = scope_query(autoscale.get("query"), endpoint.team.namespace)
        except QueryRefused as exc:
            logger.warning("endpoint %s (%s, team %s): its autoscale query is refused (%s); it now scales on "
                           "requests_per_second", endpoint.pk, endpoint.name, endpoint.team.slug, exc)
            autoscale = {"metric": "requests_per_second", "target": autoscale.get("target") or 1}
        if autoscale != endpoint.autoscale:
            endpoint_model.objects.filter(pk=endpoint.pk).update(autoscale=autoscale)


class Migration(migrations.Migration):

    dependencies = [
        ("inference", "0002_workload_idle"),
        ("portal", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(scope_stored_queries, migrations.RunPython.noop),
    ]
