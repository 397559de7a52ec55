"""The block kind: no cluster objects; its window, opened and closed by the clock, is its status."""

from __future__ import annotations

from datetime import datetime

from cluster.status import WorkloadStatus
from quotas.decide import ResourceRequest
from teams.models import Role
from teams.permissions import check_may_end, get_for_user
from tests.workloads.holdkind.models import BlockState, UnitBlock
from workloads import services
from workloads.constants import Message
from workloads.models import ReasonCode
from workloads.registry import Lifecycle, Reactions, WorkloadKind

_PHASES = {"Booked": BlockState.BOOKED, "Held": BlockState.HELD, "Done": BlockState.DONE}


class BlockConflict(Exception):
    """The block already ended: there is nothing to end."""


class BlockKind(WorkloadKind, Reactions):
    model = UnitBlock
    noun = "block"
    cluster_objects = False
    lifecycle = Lifecycle(queued=BlockState.QUEUED, admitted=BlockState.ADMITTED, applied=BlockState.BOOKED,
                          failed=BlockState.FAILED, ended=BlockState.ENDED, applyable=(BlockState.ADMITTED,),
                          removed=(BlockState.ENDED,))
    conflict_error = BlockConflict
    observed_fields = ("units", "starts_at", "minutes")  # its status reads them every cycle
    committed_units = ("units",)
    runtime_limit = "minutes"

    def get_for_user(self, user, pk, role=Role.VIEWER, staff_reads=False):
        return get_for_user(UnitBlock.objects.select_related("team", "flavor", "created_by"), user, role,
                            staff_reads=staff_reads, pk=pk)

    def end(self, user, block):
        check_may_end(user, block)
        if not services.end_by_user(block, f"ended by {user.username}"):
            raise BlockConflict(f"The block already ended ({block.state}).")
        block.refresh_from_db()
        return block

    def resource_request(self, block):
        units, per_node = block.placement_shape
        per_hour = block.cost_per_hour_at(units)
        return ResourceRequest(block.flavor.name, units, per_node, description=f"block {block.name}",
                               estimated_cost=per_hour * block.minutes / 60, cost_per_hour=per_hour)

    def manifests(self, block):
        return []  # nothing on a cluster: its units are held, not run

    def status(self, observed, block, now: datetime) -> WorkloadStatus:
        """Its window by the clock: open from its start (or its admission, if later: units it did not hold
        are not billed) to its end; its units in use while open, and — closed — up to its end."""
        opens, closes = max(block.starts_at, block.admitted_at or block.starts_at), block.ends_at
        if now < opens:
            return WorkloadStatus("Booked", "")
        units = block.units if opens < closes else 0
        if now < closes:
            return WorkloadStatus("Held", "", started_at=opens, running_units=units)
        return WorkloadStatus("Done", "", started_at=opens, finished_at=closes, running_units=units)

    def state_for(self, status, block):
        return _PHASES.get(status.state, block.state)

    def on_budget_spent(self, block, now):
        """Ended like a user's end: the budget policy says stop what costs."""
        return services.end_by_user(block, Message.STOPPED_BY_BUDGET, ReasonCode.STOPPED_BY_BUDGET)
