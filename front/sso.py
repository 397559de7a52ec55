"""Single sign-on's pages: the provider's login and callback URLs, and the page that says why a sign-in failed.

allauth runs the OpenID Connect flow (discovery, redirect, code exchange, the ID token's checks
in :mod:`teams.oidc`); this module is its Slipway side. Every way the flow can fail — a bad,
expired or foreign token, a provider that is down, a cancelled sign-in, no groups claim — ends on
one page in the portal's look that says what happened (status 403; 502 when the provider could
not be reached), never on allauth's own templates or a 500. Memberships follow the groups at
every sign-in (:func:`teams.sso.sync_memberships`, connected in :mod:`teams.signals`).
"""

from __future__ import annotations

import requests
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialApp
from allauth.socialaccount.providers.oauth2.client import OAuth2Error
from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView
from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from teams import oidc
from teams.sso import MissingGroupsClaimError, claim_groups, safe_username

#: The one flow of allauth's that Slipway offers (allauth's ``process`` values: login, connect, redirect).
LOGIN = "login"
NOT_OFFERED = ("Slipway offers single sign-on only to sign in. Linking the identity provider to an account "
               "that is signed in already is not offered, so nothing was changed.")


def sign_in_failed(request: HttpRequest, reason: str, *, status: int = 403, claims: dict | None = None) -> HttpResponse:
    """The page of a refused single sign-on: why, and what to do (sign in again, ask staff)."""
    context = {"reason": reason, "provider_name": settings.SLIPWAY_OIDC_NAME,
               "staff_contact": settings.SLIPWAY_STAFF_CONTACT, "claim_names": sorted(claims or {})}
    return render(request, "portal/sso_error.html", context, status=status)


class SlipwaySocialAccountAdapter(DefaultSocialAccountAdapter):
    """allauth's hooks: the provider app from the settings, the groups claim required, errors on our page."""

    def list_apps(self, request, provider=None, client_id=None) -> list[SocialApp]:
        """Only the app of ``SLIPWAY_OIDC_*`` (none when unset): database-made apps are not used."""
        app = oidc.social_app()
        if app is None or provider not in (None, oidc.PROVIDER, oidc.PROVIDER_ID):
            return []
        if client_id is not None and client_id != app.client_id:
            return []
        return [app]

    def save_user(self, request, sociallogin, form=None):
        """A first sign-in's account: a username that imitates another one's (Cyrillic "а" for Latin
        "a") is replaced by a plainly different one, so no one passes for a colleague in team lists,
        audit logs and the admin console (:func:`teams.sso.safe_username`)."""
        user = sociallogin.user
        if user.username:
            user.username = safe_username(user.username, sociallogin.account.uid)
        return super().save_user(request, sociallogin, form)

    def pre_social_login(self, request, sociallogin) -> None:
        """Refuse any flow but a sign-in (never link a subject to the account signed in: the state of a
        flow started elsewhere could still say so), and a sign-in whose claims have no groups claim:
        it cannot say which teams are the person's."""
        if (sociallogin.state or {}).get("process", LOGIN) != LOGIN:
            raise ImmediateHttpResponse(sign_in_failed(request, NOT_OFFERED, status=400))
        claims = oidc.claims_of(sociallogin.account.extra_data)
        try:
            claim_groups(claims)
        except MissingGroupsClaimError as exc:
            reason = f"{exc} Slipway needs it to know your teams: ask whoever runs the identity provider to " \
                     "add it to Slipway's client, then sign in again."
            raise ImmediateHttpResponse(sign_in_failed(request, reason, claims=claims)) from exc

    def on_authentication_error(self, request, provider, error=None, exception=None, extra_context=None) -> None:
        status = 502 if isinstance(exception, requests.RequestException) else 403
        raise ImmediateHttpResponse(sign_in_failed(request, oidc.refusal(exception), status=status))


def _flow(view_class, request: HttpRequest, provider_id: str) -> HttpResponse:
    """Run one of allauth's flow views with Slipway's adapter; what it lets through is a refusal page too."""
    try:
        return view_class.adapter_view(oidc.SlipwayOpenIDConnectAdapter(request, provider_id))(request)
    except SocialApp.DoesNotExist:
        raise Http404 from None  # single sign-on is off, or another provider id
    except (OAuth2Error, requests.RequestException) as exc:  # discovery failed or named another issuer
        status = 502 if isinstance(exc, requests.RequestException) else 403
        return sign_in_failed(request, oidc.refusal(exc), status=status)


@require_POST
def login(request: HttpRequest, provider_id: str) -> HttpResponse:
    """Start the flow (the login page's button posts here): to the provider's authorization endpoint.

    POST only (CSRF-protected): a link elsewhere cannot start a sign-in in someone's browser.
    """
    if any(process != LOGIN for process in (*request.POST.getlist("process"), *request.GET.getlist("process"))):
        # allauth also serves "connect" (link the provider's subject to whoever is signed in) and
        # "redirect"; Slipway offers neither: an account is tied to its subject at its first sign-in.
        # allauth reads ``process`` from the body or else the query string: both are checked here
        # (security review 5 #9a), and the callback checks the flow's state again (pre_social_login).
        return sign_in_failed(request, NOT_OFFERED, status=400)
    return _flow(OAuth2LoginView, request, provider_id)


@require_GET
def callback(request: HttpRequest, provider_id: str) -> HttpResponse:
    """Where the provider sends the person back: the code exchange, the token's checks, the sign-in."""
    return _flow(OAuth2CallbackView, request, provider_id)


@require_GET
def inactive(request: HttpRequest) -> HttpResponse:
    """Where allauth sends a deactivated user after the provider vouched for them (``account_inactive``)."""
    return sign_in_failed(request, "Your Slipway account is deactivated, so the identity provider's sign-in "
                                   "was not accepted. Ask platform staff to reactivate it.")
