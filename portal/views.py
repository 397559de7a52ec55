"""Portal pages that belong to no app: login, team switcher, API tokens.

Views stay thin: they check access, call one service function, render.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from portal import services, throttle
from portal.forms import ApiTokenForm
from portal.middleware import SESSION_KEY
from portal.permissions import require_team


class LoginView(auth_views.LoginView):
    """Sign-in, throttled: after repeated failures for a username or from an address, 429 for a while."""

    template_name = "portal/login.html"
    redirect_authenticated_user = True

    def post(self, request, *args, **kwargs):
        username, ip = str(request.POST.get("username", ""))[:150], services.client_ip(request)
        if throttle.blocked(username, ip):
            form = self.get_form()
            form.errors.clear()
            form.add_error(None, f"Too many failed sign-ins; try again in {throttle.WINDOW.seconds // 60} minutes.")
            return self.render_to_response(self.get_context_data(form=form), status=429)
        response = super().post(request, *args, **kwargs)
        if request.user.is_authenticated:
            throttle.clear(username)
        else:
            throttle.note_failure(username, ip)
        return response


@login_required
@require_POST
def switch_team(request: HttpRequest) -> HttpResponse:
    """Make another of the user's teams the current one (404 for teams they are not in)."""
    membership = require_team(request.user, request.POST.get("team", ""))
    request.session[SESSION_KEY] = membership.team.slug
    target = request.POST.get("next", "")
    # Only a local path: redirect() would take a bare word for a URL name (NoReverseMatch).
    if not target.startswith("/") or not url_has_allowed_host_and_scheme(target, {request.get_host()}):
        return redirect("dashboard")
    return redirect(target)


@never_cache  # the response may carry a raw token: no browser or proxy may keep a copy
@login_required
@require_http_methods(["GET", "POST"])
def api_tokens(request: HttpRequest) -> HttpResponse:
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
def revoke_api_token(request: HttpRequest, pk: int) -> HttpResponse:
    # Only the owner's tokens are reachable: someone else's token id is a 404.
    token = get_object_or_404(request.user.api_tokens, pk=pk)
    services.revoke_api_token(request.user, token, ip=services.client_ip(request))
    if request.htmx:
        # The swapped row shows the new state; a flash message would only surface later,
        # on an unrelated page.
        return render(request, "portal/api_tokens.html#token-row", {"token": token})
    messages.success(request, f"Token “{token.name}” revoked.")
    return redirect("api-tokens")

