"""The notebooks' admin list: the shared read-only rows and the one "End selected" action (here: stop)."""

from django.contrib import admin

from tests.workloads.tinykind.models import Notebook
from workloads.admin import WorkloadAdmin


@admin.register(Notebook)
class NotebookAdmin(WorkloadAdmin):
    list_display = ["name", "team", "state", "flavor", "created", "billed"]
