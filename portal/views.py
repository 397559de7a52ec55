"""Portal pages that belong to no app: login, team switcher, API tokens.

Views stay thin: they check access, call one service function, render.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from portal import services
from portal.forms import ApiTokenForm
from portal.middleware import SESSION_KEY
from portal.models import AuditEvent
from portal.permissions import require_team


class LoginView(auth_views.LoginView):
    template_name = "portal/login.html"
    redirect_authenticated_user = True


@receiver(user_login_failed)
def _audit_failed_login(sender, credentials, request=None, **kwargs):
    services.audit(
        AuditEvent.Action.LOGIN_FAILED,
        username=str(credentials.get("username", ""))[:150],
        ip=services.client_ip(request) if request is not None else None,
    )


@receiver(user_logged_in)
def _audit_login(sender, request, user, **kwargs):
    services.audit(AuditEvent.Action.LOGIN, actor=user, ip=services.client_ip(request))


@login_required
@require_POST
def switch_team(request):
    """Make another of the user's teams the current one (404 for teams they are not in)."""
    membership = require_team(request.user, request.POST.get("team", ""))
    request.session[SESSION_KEY] = membership.team.slug
    target = request.POST.get("next") or "dashboard"
    if target != "dashboard" and not url_has_allowed_host_and_scheme(target, {request.get_host()}):
        target = "dashboard"
    return redirect(target)


@login_required
@require_http_methods(["GET", "POST"])
def api_tokens(request):
    """List the user's tokens; create one (its raw value is shown exactly once)."""
    form = ApiTokenForm(request.POST or None)
    new_token = None
    if request.method == "POST" and form.is_valid():
        _token, new_token = services.create_api_token(
            request.user, form.cleaned_data["name"], form.cleaned_data["expires_days"], ip=services.client_ip(request)
        )
        form = ApiTokenForm()
    tokens = request.user.api_tokens.all()
    return render(request, "portal/api_tokens.html", {"form": form, "tokens": tokens, "new_token": new_token})


@login_required
@require_POST
def revoke_api_token(request, pk: int):
    # Only the owner's tokens are reachable: someone else's token id is a 404.
    token = get_object_or_404(request.user.api_tokens, pk=pk)
    services.revoke_api_token(request.user, token, ip=services.client_ip(request))
    messages.success(request, f"Token “{token.name}” revoked.")
    if request.htmx:
        return render(request, "portal/api_tokens.html#token-row", {"token": token})
    return redirect("api-tokens")


@login_required
def endpoints_placeholder(request):
    """Inference endpoints are not built yet; say so instead of a dead link."""
    if request.method != "GET":
        raise Http404
    return render(request, "inference/coming.html")


@login_required
def dashboard(request):
    """The landing page: the current team at a glance."""
    return render(request, "portal/dashboard.html", {})
