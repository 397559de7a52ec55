"""The notebook kind: a custom object per notebook, its status in ``status.phase``."""

from __future__ import annotations

from cluster.backends.base import MANAGED_BY_LABEL, TEAM_LABEL, WORKLOAD_LABEL, ResourceKind
from cluster.status import WorkloadStatus, parse_time, running_units
from quotas.decide import ResourceRequest
from teams.models import Role
from teams.permissions import check_may_end, get_for_user
from tests.workloads.tinykind.models import Notebook, NotebookState
from workloads import services
from workloads.registry import Announces, KindEvent, Lifecycle, NavItem, Pages, WorkloadKind

_PHASES = {"Pending": NotebookState.STARTING, "Running": NotebookState.RUNNING, "Done": NotebookState.DONE,
           "Failed": NotebookState.FAILED}


def build_notebook(name: str, namespace: str, team: str, gpus: int) -> dict:
    """Pure builder: the notebook's one object."""
    labels = {MANAGED_BY_LABEL: "slipway", TEAM_LABEL: team, WORKLOAD_LABEL: name}
    return {"apiVersion": "tiny.slipway.dev/v1", "kind": "Notebook",
            "metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": {"gpus": gpus}}


class NotebookConflict(Exception):
    """The notebook already ended: there is nothing to stop."""


class NotebookKind(WorkloadKind, Pages, Announces):
    model = Notebook
    noun = "notebook"
    lifecycle = Lifecycle(queued=NotebookState.QUEUED, admitted=NotebookState.ADMITTED,
                          applied=NotebookState.STARTING, failed=NotebookState.FAILED, ended=NotebookState.STOPPED,
                          applyable=(NotebookState.ADMITTED,), removed=(NotebookState.STOPPED,))
    # Its pages: the generated read views (urls.py), its nav item, its end on the staff list and in the admin.
    end_verb, ended_word, conflict_error = "Stop", "stopped", NotebookConflict
    nav = NavItem("Notebooks", "tinykind:notebook-list", 15)
    state_template = "tinykind/_state.html"
    # Its event kind: subscribable and recorded with no change (and no migration) in notifications.
    events = (KindEvent(NotebookState.DONE, "notebook_done", "Notebook done", "is done"),)

    def get_for_user(self, user, pk, role=Role.VIEWER, staff_reads=False):
        return get_for_user(Notebook.objects.select_related("team", "flavor", "created_by"), user, role,
                            staff_reads=staff_reads, pk=pk)

    def end(self, user, notebook):
        check_may_end(user, notebook)
        if not services.end_by_user(notebook, f"stopped by {user.username}"):
            raise NotebookConflict(f"The notebook already ended ({notebook.state}).")
        notebook.refresh_from_db()
        return notebook
    resources = (ResourceKind("tiny.slipway.dev", "v1", "Notebook", "notebooks", observed=True, deleted=True),)

    def resource_request(self, notebook):
        units, per_node = notebook.placement_shape
        return ResourceRequest(notebook.flavor.name, units, per_node, description=notebook.name)

    def manifests(self, notebook):
        return [build_notebook(notebook.object_name, notebook.namespace, notebook.team.slug, notebook.gpus)]

    def status(self, observed, notebook, now):
        obj = observed.first("Notebook")
        if obj is None:
            return None
        status = obj.get("status") or {}
        return WorkloadStatus(status.get("phase", "Pending"), status.get("message", ""),
                              parse_time(status.get("startTime")), parse_time(status.get("endTime")),
                              running_units(observed.pods))

    def state_for(self, status, notebook):
        return _PHASES.get(status.state, notebook.state)
