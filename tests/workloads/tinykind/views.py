"""The notebook kind's one page of its own: the list its nav item opens (the read views are generated)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse

from tests.workloads.tinykind.models import Notebook
from workloads.views import current_membership


@login_required
def notebook_list(request: HttpRequest) -> HttpResponse:
    """The current team's notebooks by name: a kind's list page at its smallest."""
    membership = current_membership(request)
    names = Notebook.objects.filter(team=membership.team).values_list("name", flat=True) if membership else []
    return HttpResponse(", ".join(names), content_type="text/plain")
