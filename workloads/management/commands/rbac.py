"""``manage.py rbac``: print deploy/rbac.yaml, Slipway's ClusterRole, from the registered kinds.

The platform's rules are :data:`cluster.rbac.PLATFORM_RULES`; each workload kind's are derived from
the resources it declares (``WorkloadKind.resources``), so adding a kind changes nothing under
deploy/ by hand: ``make rbac`` writes the file again (tests/deploy compares the two).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from cluster.rbac import render
from workloads.registry import resource_declarations


class Command(BaseCommand):
    help = "Print Slipway's ClusterRole and its binding (deploy/rbac.yaml) for the registered workload kinds."

    def handle(self, *args, **options) -> None:
        self.stdout.write(render(resource_declarations()), ending="")
