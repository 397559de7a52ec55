"""OpenID Connect through django-allauth: the provider app from Slipway's settings, every ID token checked.

allauth's OpenID Connect adapter skips the ID token's signature when the token came straight from
the token endpoint (OpenID Connect Core §3.1.3.7 allows that over TLS). Slipway checks it anyway,
and checks that the provider's discovery document names the configured issuer
(``SLIPWAY_OIDC_ISSUER``, Discovery §4.3): a misrouted or spoofed endpoint signs nobody in. The
issuer, audience (the client id) and expiry are checked too (:func:`verify_id_token`, with PyJWT).

Each refusal is an :class:`OAuth2Error` whose cause says what was wrong; :func:`refusal` turns it
into the sentence the sign-in error page shows (``front.sso``).
"""

from __future__ import annotations

import jwt
from allauth.socialaccount.adapter import get_adapter
from allauth.socialaccount.models import SocialAccount, SocialApp
from allauth.socialaccount.providers.oauth2.client import OAuth2Error
from allauth.socialaccount.providers.openid_connect.provider import OpenIDConnectProvider
from allauth.socialaccount.providers.openid_connect.views import OpenIDConnectOAuth2Adapter
from django.conf import settings

#: The provider's id in allauth's URLs (/accounts/oidc/slipway/login/) and its SocialAccount rows.
PROVIDER_ID = "slipway"
#: allauth's name for the OpenID Connect provider class (SocialApp.provider).
PROVIDER = "openid_connect"


def configured() -> bool:
    """Whether single sign-on is on (``SLIPWAY_OIDC_ISSUER`` and ``SLIPWAY_OIDC_CLIENT_ID`` set)."""
    return bool(settings.SLIPWAY_OIDC_ISSUER and settings.SLIPWAY_OIDC_CLIENT_ID)


def social_app() -> SocialApp | None:
    """The provider app allauth signs in with, built from the settings (never saved); None when off."""
    if not configured():
        return None
    return SocialApp(
        provider=PROVIDER, provider_id=PROVIDER_ID, name=settings.SLIPWAY_OIDC_NAME,
        client_id=settings.SLIPWAY_OIDC_CLIENT_ID, secret=settings.SLIPWAY_OIDC_CLIENT_SECRET,
        # Discovery lives under the issuer; an issuer written with a final "/" (Auth0's) still finds it.
        settings={"server_url": settings.SLIPWAY_OIDC_ISSUER.rstrip("/"), "fetch_userinfo": True,
                  "oauth_pkce_enabled": True},
    )


class IssuerMismatchError(Exception):
    """The discovery document names another issuer than ``SLIPWAY_OIDC_ISSUER``."""

    def __init__(self, stated: str) -> None:
        super().__init__(f"the provider says its issuer is {stated!r}, Slipway expects "
                         f"{settings.SLIPWAY_OIDC_ISSUER!r} (SLIPWAY_OIDC_ISSUER)")


class SubjectMismatchError(Exception):
    """The userinfo endpoint answered about another ``sub`` than the ID token's."""


class KeyAlgorithmMismatchError(jwt.InvalidKeyError):
    """The ID token's algorithm is not one the key its ``kid`` names can verify (an ES256 token, an RSA key)."""


class SlipwayOpenIDConnectAdapter(OpenIDConnectOAuth2Adapter):
    """allauth's adapter with the discovery document's issuer and every ID token's signature checked."""

    @property
    def openid_config(self) -> dict:
        config = super().openid_config
        if config.get("issuer") != settings.SLIPWAY_OIDC_ISSUER:
            raise OAuth2Error("Discovery names another issuer") from IssuerMismatchError(str(config.get("issuer")))
        return config

    def complete_login(self, request, app, token, **kwargs):
        """allauth's login, refused when the userinfo answer is about another subject than the ID
        token (OIDC Core 5.3.2: the ``sub`` of both must be the same, or the userinfo is not used)."""
        login = super().complete_login(request, app, token, **kwargs)
        data = login.account.extra_data or {}
        subjects = {str((data.get(part) or {}).get("sub", "")) for part in ("id_token", "userinfo") if data.get(part)}
        if len(subjects) > 1:
            raise OAuth2Error("The userinfo answer names another subject") from SubjectMismatchError()
        return login

    def _decode_id_token(self, app: SocialApp, id_token: str) -> dict:
        return verify_id_token(id_token, jwks_uri=self.openid_config["jwks_uri"], issuer=self.openid_config["issuer"],
                               audience=app.client_id)


#: Signature algorithms an ID token may use: asymmetric only (an HS256 token "signed" with a public key is refused).
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


def verify_id_token(id_token: str, *, jwks_uri: str, issuer: str, audience: str) -> dict:
    """The claims of ``id_token`` once its signature (by a key of ``jwks_uri``), issuer, audience and expiry hold.

    The key is the one the token's ``kid`` names or, for a token without one (a provider with a
    single key may leave it out; allauth's own lookup then fails), the JWKS's only signing key.
    Raises :class:`OAuth2Error` caused by PyJWT's exception for what was wrong (or by
    :class:`KeyAlgorithmMismatchError`, one of them), so that every bad token or key set ends on the
    refusal page, never a 500; requests' errors (the JWKS unreachable, or answering an error) pass.
    """
    try:
        header = jwt.get_unverified_header(id_token)
        keys = _published_keys(jwks_uri)
        kid = header.get("kid")
        matching = [key for key in keys if key.key_id == kid] if kid else keys
        if len(matching) != 1:
            raise jwt.InvalidKeyError(f"no single published key for kid {kid!r}")
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            raise jwt.InvalidAlgorithmError(f"algorithm {algorithm!r} is not accepted")
        try:
            return jwt.decode(id_token, key=matching[0].key, algorithms=[algorithm], audience=audience,
                              issuer=issuer, options={"require": ["iss", "aud", "exp", "iat", "sub"]})
        except (TypeError, jwt.InvalidKeyError) as exc:
            # The key named is not one the token's algorithm can use: PyJWT says so with InvalidKeyError (another
            # curve, an Ed25519 algorithm given an RSA key) or, for an RSA or EC algorithm given a key object of
            # the other type, with TypeError ("Expecting a PEM-formatted key."), which would be a 500.
            raise KeyAlgorithmMismatchError(f"algorithm {algorithm!r} cannot use the key {kid!r}") from exc
    except jwt.PyJWTError as exc:
        raise OAuth2Error("Invalid id_token") from exc


def _published_keys(jwks_uri: str) -> list[jwt.PyJWK]:
    """The signing keys the provider's JWKS document publishes.

    Raises ``jwt.PyJWKSetError`` when the answer is not a JSON key set: not JSON at all (requests' decode
    error would otherwise read as "the provider is unreachable"), or JSON of another shape, which PyJWT's
    reader does not expect (a list, a string: an ``AttributeError``).
    """
    with get_adapter().get_requests_session() as session:
        response = session.get(jwks_uri)
        response.raise_for_status()
        try:
            document = response.json()
        except ValueError as exc:
            raise jwt.PyJWKSetError("the JWKS answer is not JSON") from exc
    if not isinstance(document, dict):
        raise jwt.PyJWKSetError("the JWKS answer is not a JSON object")
    return [key for key in jwt.PyJWKSet.from_dict(document).keys if key.public_key_use in (None, "sig")]


class SlipwayOpenIDConnectProvider(OpenIDConnectProvider):
    """The provider class allauth uses (``SOCIALACCOUNT_PROVIDERS``): it redirects with the adapter above."""

    oauth2_adapter_class = SlipwayOpenIDConnectAdapter


#: What each kind of bad ID token means to the person signing in, by the decoder's exception class.
_TOKEN_PROBLEMS: tuple[tuple[type[Exception], str], ...] = (
    (jwt.ExpiredSignatureError, "The sign-in token from the identity provider has expired. Sign in again; if it "
                                "keeps happening, the provider's clock or Slipway's is wrong."),
    (jwt.InvalidIssuerError, "The sign-in token was issued by another identity provider than the one Slipway "
                             "trusts (its issuer does not match)."),
    (jwt.InvalidAudienceError, "The sign-in token was issued for another application than Slipway (its audience "
                               "is not Slipway's client id)."),
    (jwt.InvalidSignatureError, "The sign-in token's signature does not match the identity provider's keys."),
    (KeyAlgorithmMismatchError, "The sign-in token's algorithm does not fit the identity provider's signing key "
                                "it names."),
    (jwt.InvalidKeyError, "The sign-in token names a signing key the identity provider does not publish."),
    (jwt.InvalidAlgorithmError, "The sign-in token is signed with an algorithm Slipway does not accept."),
    (SubjectMismatchError, "The identity provider's ID token and its userinfo answer are about two different "
                           "people (their subjects differ), so you were not signed in."),
    (jwt.MissingRequiredClaimError, "The sign-in token lacks a claim every ID token must carry."),
    (jwt.ImmatureSignatureError, "The sign-in token is not valid yet: the provider's clock or Slipway's is wrong."),
    (jwt.PyJWKSetError, "The identity provider's published signing keys (its JWKS) could not be read, so the "
                        "sign-in token could not be checked."),
    (jwt.PyJWTError, "The identity provider sent a sign-in token Slipway cannot read."),
)


def refusal(exception: BaseException | None) -> str:
    """The sentence that says why a sign-in through the provider was refused, from allauth's exception.

    Decided by the exception's class and cause, never by its text.
    """
    cause = exception.__cause__ if exception is not None else None
    if isinstance(cause, IssuerMismatchError):
        return f"Slipway's single sign-on is misconfigured: {cause}."
    for kind, sentence in _TOKEN_PROBLEMS:
        if isinstance(cause, kind):
            return sentence
    if isinstance(exception, OAuth2Error):
        return ("The identity provider did not accept the sign-in, or its answer could not be verified, so you were "
                "not signed in. Sign in again from the login page.")
    if exception is not None:  # requests' errors: the provider did not answer, or answered an error
        return "Slipway could not reach the identity provider or it refused the request. Try again in a moment."
    return "The sign-in did not complete (it was started elsewhere, expired, or the provider reported an error)."


def claims_of(extra_data: dict) -> dict:
    """The person's claims as allauth keeps them (``SocialAccount.extra_data``): the ID token's, with the
    userinfo endpoint's on top (a provider may put the groups in either)."""
    return {**(extra_data.get("id_token") or {}), **(extra_data.get("userinfo") or {})}


def last_claims(user) -> dict | None:
    """``user``'s claims at their last sign-in through the provider; None for someone who never used it."""
    account = SocialAccount.objects.filter(user=user, provider=PROVIDER_ID).order_by("-last_login").first()
    return claims_of(account.extra_data) if account is not None else None
