"""A real OpenID provider on 127.0.0.1 for the single sign-on tests, and the ways it can be made to misbehave.

The provider is PyPI's ``oidc-provider-mock`` (authlib underneath): discovery, an authorization
page that asks for a subject, the code exchange, RS256 ID tokens, userinfo, JWKS. People and
their claims are set through its ``PUT /users/<sub>``.

:class:`Misbehaviour` sits in front of it as WSGI middleware and changes what it answers, so the
tests can see Slipway refuse what a broken or hostile provider sends: an ID token re-signed with
other claims (expired, another issuer, another audience) by a second key the JWKS then publishes,
one signed by a key the JWKS does not publish, one whose algorithm does not fit the published key it names,
a JWKS that is no key set, or a discovery document naming another issuer.
Untouched, every answer is the provider's own.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import jwt
import requests
import werkzeug.serving
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import RSAAlgorithm
from oidc_provider_mock import app as provider_app

#: The kid of the second key the JWKS publishes (and of the rogue key, which it does not).
EXTRA_KID = "tests-extra-key"


def _rsa_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class Misbehaviour:
    """What the provider does wrong from now on (all off: it behaves)."""

    #: Re-sign each ID token after this change to its claims (with the published extra key).
    claims: Callable[[dict], dict] | None = None
    #: Sign with a key of the same kid that the JWKS does not publish.
    rogue_signature: bool = False
    #: Sign ES256, with an EC key, naming the published RSA key's kid.
    foreign_algorithm: bool = False
    #: What the JWKS endpoint answers instead of the key set (e.g. a page that is not JSON).
    jwks_body: bytes | None = None
    #: The issuer its discovery document states.
    discovery_issuer: str | None = None
    published_key: object = field(default_factory=_rsa_key)
    rogue_key: object = field(default_factory=_rsa_key)

    def reset(self) -> None:
        self.claims, self.rogue_signature, self.discovery_issuer = None, False, None
        self.foreign_algorithm, self.jwks_body = False, None

    def wrap(self, app):
        """The provider's WSGI app with this misbehaviour applied to discovery, JWKS and token answers."""

        def wrapped(environ, start_response):
            path = environ.get("PATH_INFO", "")
            if path not in ("/.well-known/openid-configuration", "/jwks", "/oauth2/token"):
                return app(environ, start_response)
            captured: dict = {}

            def capture(status, headers, exc_info=None):
                captured.update(status=status, headers=headers)
                return lambda data: None

            body = b"".join(app(environ, capture))
            if path == "/jwks" and self.jwks_body is not None:
                body = self.jwks_body
            elif captured["status"].startswith("200"):
                body = json.dumps(self._change(path, json.loads(body))).encode()
            headers = [(k, v) for k, v in captured["headers"] if k.lower() != "content-length"]
            start_response(captured["status"], [*headers, ("Content-Length", str(len(body)))])
            return [body]

        return wrapped

    def _change(self, path: str, document: dict) -> dict:
        resigning = self.claims or self.rogue_signature or self.foreign_algorithm
        if path == "/jwks" and resigning:
            # Published only while re-signing: the provider's own tokens carry no kid, which is fine
            # while its JWKS holds one key (teams.oidc.verify_id_token), and ambiguous with two.
            extra = json.loads(RSAAlgorithm.to_jwk(self.published_key.public_key()))
            document["keys"].append({**extra, "kid": EXTRA_KID, "alg": "RS256", "use": "sig"})
        elif path.startswith("/.well-known") and self.discovery_issuer is not None:
            document["issuer"] = self.discovery_issuer
        elif path == "/oauth2/token" and "id_token" in document and resigning:
            claims = jwt.decode(document["id_token"], options={"verify_signature": False})
            claims = self.claims(claims) if self.claims else claims
            if self.foreign_algorithm:
                document["id_token"] = jwt.encode(claims, ec.generate_private_key(ec.SECP256R1()), algorithm="ES256",
                                                  headers={"kid": EXTRA_KID})
                return document
            key = self.rogue_key if self.rogue_signature else self.published_key
            document["id_token"] = jwt.encode(claims, key, algorithm="RS256", headers={"kid": EXTRA_KID})
        return document


@dataclass
class Provider:
    """The running provider: its issuer URL and how to set a person's claims."""

    issuer: str
    misbehaviour: Misbehaviour

    def set_user(self, sub: str, **claims) -> None:
        """The claims ``sub`` gets from now on (besides ``sub``), e.g. ``groups=["gpu-ml"]``."""
        requests.put(f"{self.issuer}/users/{sub}", json=claims, timeout=5).raise_for_status()


@contextmanager
def running_provider() -> Iterator[Provider]:
    """The provider on a free port of 127.0.0.1 in a thread, until the block ends."""
    misbehaviour = Misbehaviour()
    server = werkzeug.serving.make_server("127.0.0.1", 0, misbehaviour.wrap(provider_app()), threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield Provider(issuer=f"http://127.0.0.1:{server.server_port}", misbehaviour=misbehaviour)
    finally:
        server.shutdown()
        thread.join(5)
        server.server_close()


def expired(claims: dict) -> dict:
    """An ID token that expired ten minutes ago."""
    now = int(time.time())
    return {**claims, "iat": now - 3600, "exp": now - 600}


def issued_by(issuer: str) -> Callable[[dict], dict]:
    return lambda claims: {**claims, "iss": issuer}


def issued_for(audience: str) -> Callable[[dict], dict]:
    return lambda claims: {**claims, "aud": audience}
