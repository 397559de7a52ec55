"""Celery tasks of the quotas app: mirror a team's quota into its namespace's ResourceQuota."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

import core.backend
import fleet.services as fleet
from billing import reserved
from cluster.errors import Transient
from cluster.manifests import build_team
from cluster.specs import TeamSpec
from fleet.constants import State
from fleet.models import GpuFlavor
from quotas.admission import admit_waiting
from quotas.facts import cohort_figures, cohort_id_of, flavor_quota
from quotas.models import TeamQuota
from teams.models import Team


def team_spec(team):
    """The :class:`cluster.specs.TeamSpec` of ``team``: its quotas summed per Kubernetes resource.

    Several flavors can share one resource (A100 and H100 are both ``nvidia.com/gpu``), and a
    ResourceQuota counts per resource, so their limits add up.
    """
    totals: dict[str, int] = {}
    # In a cohort the backstop is the most the team may ever hold (its nominal quota plus what
    # the cohort could lend it): the namespace must admit the pods of borrowed work.
    cohort = cohort_figures(cohort_id_of(team))
    for quota in TeamQuota.objects.filter(team=team).select_related("flavor"):
        units = quota.limit if cohort is None else flavor_quota(quota.flavor, quota, cohort, team.pk).most()
        totals[quota.flavor.resource_name] = totals.get(quota.flavor.resource_name, 0) + units
    # Its reserved windows' units are on top of the quota (docs/reservations.md "Inside the window"): the most
    # its windows not over hold at once, so the pods of work admitted into them are admitted by the namespace.
    reserved_units = reserved.most_at_once(team.pk, timezone.now())
    for flavor in GpuFlavor.objects.filter(pk__in=reserved_units):
        totals[flavor.resource_name] = totals.get(flavor.resource_name, 0) + reserved_units[flavor.pk]
    return TeamSpec(slug=team.slug, namespace=team.namespace, quotas=tuple(sorted(totals.items())))


@shared_task(autoretry_for=(Transient,), retry_backoff=True, retry_backoff_max=300, retry_jitter=True,
             max_retries=10)
def sync_team_quota(team_id: int) -> list[str]:
    """Apply the team's Namespace/ResourceQuota objects, then admit queued work that fits.

    Safe to run twice: the objects are named from the team, so applying again is a no-op, and
    admission is idempotent. Returns the refs admitted from the queue.
    """
    team = Team.objects.filter(pk=team_id).first()
    if team is None:
        return []
    objects = build_team(team_spec(team), core.backend.cluster_config())
    unanswered: Transient | None = None
    for cluster in fleet.clusters():
        if cluster.state == State.LOST:
            continue  # its next apply brings the namespace objects with it
        try:
            fleet.backend(cluster).apply(objects)
        except Transient as exc:
            unanswered = unanswered or exc  # the other clusters still get theirs
    if unanswered is not None:
        raise unanswered  # retried by Celery
    return admit_waiting(team)
