"""Platform staff's operations page: every team's runs and endpoints in one list, with their actions.

The single sign-on preview (:func:`sso_preview`) is here too: the claims document staff paste,
read as a sign-in reads it (:mod:`teams.sso`), and the teams and roles it gives.

Staff filter the list by team, state, flavor and user, sort it by age or cost, end a workload
(cancel a run, delete an endpoint) or take one of its kind's staff actions (scale an endpoint
to its minimum) — each through what the kind declares (``workloads.registry``): its own
service function, the one the portal and the API use, so audit and quota release are the same.

Each of those actions is destructive, so none happens on one click: the list's button opens a
confirmation page (GET) that says what will happen, and only its form (POST) acts — as the
portal's own Delete endpoint does. Messages name the team by its name.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.text import capfirst
from django.views.decorators.http import require_GET, require_http_methods

from fleet.models import GpuFlavor
from front.forms import ClaimsPreviewForm
from teams import sso
from teams.models import Team
from workloads.registry import Pages, StaffActions, kind_for, kind_of, kinds, label_of
from workloads.services import SORTS, every_teams_workloads


class StaffFilterForm(forms.Form):
    """The list's filters; every choice comes from what exists, so a bad value is a form error, not an empty list."""

    team = forms.ChoiceField(required=False)
    state = forms.ChoiceField(required=False)
    flavor = forms.ChoiceField(required=False)
    user = forms.CharField(required=False, max_length=150)
    sort = forms.ChoiceField(required=False, choices=[(s, f"by {s}") for s in SORTS])

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [("", "every team"), *Team.objects.order_by("slug").values_list("slug", "slug")]
        states = sorted({value for kind in kinds() for value, _ in kind.model.state_choices()})
        self.fields["state"].choices = [("active", "active (queued or holding quota)"), ("", "any state"),
                                        *((s, s) for s in states)]
        self.fields["flavor"].choices = [("", "every flavor"),
                                         *GpuFlavor.objects.order_by("name").values_list("name", "name")]

    def clean_user(self) -> str:
        username = self.cleaned_data["user"].strip()
        if username and not get_user_model().objects.filter(username=username).exists():
            raise ValidationError("No user with this username.")
        return username


@require_GET
@staff_member_required
def workload_list(request: HttpRequest) -> HttpResponse:
    """Every team's runs and endpoints (active ones unless filtered otherwise), newest or costliest first."""
    filters = request.GET.copy()
    filters.pop("page", None)  # the page control's links keep every filter but the page
    form = StaffFilterForm(filters if filters else {"state": "active", "sort": "age"})
    listed, status = None, 200
    if form.is_valid():
        chosen = dict(form.cleaned_data)
        chosen["sort"] = chosen["sort"] or "age"
        listed = every_teams_workloads(**chosen, page=request.GET.get("page", 1))
    else:
        status = 400
    context = {**admin.site.each_context(request), "title": "Workloads of every team", "form": form,
               "rows": [(row, _actions(row.workload)) for row in listed.rows] if listed else [],
               "page": listed.page if listed else None,
               "filters": filters.urlencode(), "back": request.get_full_path()}
    return render(request, "admin/workloads.html", context, status=status)


def _actions(workload) -> list[tuple[str, str, str]]:
    """``(label, URL, class)`` of the list's buttons for ``workload``: its end, then its kind's staff actions."""
    if workload.is_final:
        return []
    kind, key = kind_of(workload), (workload.KIND_PREFIX, workload.pk)
    return [(Pages.of(kind).end_verb, reverse("admin-workload-end", args=key), "end-action"),
            *((a.label, reverse("admin-workload-action", args=(*key, a.slug)), f"{a.slug}-action")
              for a in StaffActions.of(kind).staff_actions if a.offered(workload))]


def _workload(prefix: str, pk: int):
    kind = kind_for(prefix)
    if kind is None:
        raise Http404
    try:
        return kind.model.objects.select_related("team", "flavor", "created_by").get(pk=pk)
    except kind.model.DoesNotExist as exc:
        raise Http404 from exc


def _back(request: HttpRequest) -> HttpResponse:
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                           require_https=request.is_secure()):
        return redirect("admin-workloads")
    return redirect(target)


def _confirm(request: HttpRequest, workload, action: str, consequence: str) -> HttpResponse:
    """The confirmation page of a destructive action: what happens, then the one form that does it."""
    next_url = request.GET.get("next", "")
    if not url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()},
                                           require_https=request.is_secure()):
        next_url = ""
    context = {**admin.site.each_context(request), "title": f"{action} {label_of(workload).words()}?", "workload": workload,
               "action": action, "consequence": consequence, "next": next_url}
    return render(request, "admin/workload_confirm.html", context)


@require_http_methods(["GET", "POST"])
@staff_member_required
def end_workload(request: HttpRequest, prefix: str, pk: int) -> HttpResponse:
    """End a workload of any team (cancel a run, delete an endpoint) through its kind's service (audited, quota
    released). GET asks for confirmation; only the POST of that page acts.
    """
    workload = _workload(prefix, pk)
    kind = kind_for(prefix)
    if request.method == "GET":
        units = kind.resource_request(workload).units
        return _confirm(request, workload, Pages.of(kind).end_verb,
                        f"Its pods are deleted and the {units} {workload.flavor.name} unit{pluralize(units)} it holds "
                        f"go{pluralize(units, 'es,')} back to {workload.team.name}'s quota at once. This cannot be undone.")
    try:
        kind.end(request.user, workload)
        messages.success(request, capfirst(f"{label_of(workload).words()} {Pages.of(kind).ended_word}."))
    except (kind.conflict_error, PermissionDenied) as exc:
        messages.error(request, str(exc) or "Not allowed.")
    return _back(request)


@require_http_methods(["GET", "POST"])
@staff_member_required
def workload_action(request: HttpRequest, prefix: str, pk: int, action: str) -> HttpResponse:
    """One of the kind's staff actions (:class:`workloads.registry.StaffAction`); GET asks for confirmation, the
    POST acts."""
    workload = _workload(prefix, pk)
    chosen = next((a for a in StaffActions.of(kind_for(prefix)).staff_actions if a.slug == action), None)
    if chosen is None:
        raise Http404
    if request.method == "GET":
        return _confirm(request, workload, chosen.label, chosen.consequence(workload))
    if chosen.act(request.user, workload):
        messages.success(request, capfirst(f"{label_of(workload).words()} {chosen.done}."))
    else:
        messages.info(request, capfirst(f"{label_of(workload).words()} {chosen.idle}."))
    return _back(request)


@require_http_methods(["GET", "POST"])
@staff_member_required
def sso_preview(request: HttpRequest) -> HttpResponse:
    """Staff: paste a claims document, see its groups and the teams and roles they give (changes nothing
    but seeding ``SLIPWAY_OIDC_GROUP_MAP``, as a sign-in would)."""
    form = ClaimsPreviewForm(request.POST if request.method == "POST" else None)
    groups, grants, status = None, None, 200
    if form.is_bound:
        if form.is_valid():
            sso.seed_group_map()
            groups, grants = form.groups, sso.grants_for(form.groups)
        else:
            status = 400
    context = {**admin.site.each_context(request), "title": "Single sign-on preview", "form": form,
               "groups": groups, "grants": grants, "claim_path": settings.SLIPWAY_OIDC_GROUPS_CLAIM,
               "staff_contact": settings.SLIPWAY_STAFF_CONTACT}
    return render(request, "admin/front/sso_preview.html", context, status=status)
