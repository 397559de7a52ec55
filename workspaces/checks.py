"""System checks of workspaces: a workspace's notebook must never be served where the portal's cookies go."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.core import checks


def host_problems(workspace_host: str, portal_url: str, cookie_domains: tuple[str | None, ...]) -> list[str]:
    """Why ``workspace_host`` (the domain under which each workspace gets ``ws-<id>.<host>``) would hand the
    portal's cookies to notebooks: it is the portal's host, or a cookie domain the portal sets (``SESSION_COOKIE_DOMAIN``, ``CSRF_COOKIE_DOMAIN``) covers it."""
    host = workspace_host.strip().lower().rstrip(".")
    if not host or "/" in host or ":" in host:
        return [f"SLIPWAY_WORKSPACE_HOST={workspace_host!r} is not a host name (no scheme, port or path)"]
    portal = (urlsplit(portal_url).hostname or "").lower().rstrip(".")
    problems = []
    if host == portal:
        problems.append(f"SLIPWAY_WORKSPACE_HOST={workspace_host!r} is the portal's host (SLIPWAY_PORTAL_URL): "
                        "notebooks would run on the portal's origin")
    for domain in filter(None, cookie_domains):
        parent = domain.lower().lstrip(".").rstrip(".")
        if host == parent or host.endswith(f".{parent}"):
            problems.append(f"the portal's cookie domain {domain!r} covers SLIPWAY_WORKSPACE_HOST={workspace_host!r}: "
                            "every notebook would receive the portal's session and CSRF cookies")
    return problems


@checks.register(checks.Tags.security)
def check_workspace_host(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """``slipway.E004``: workspaces would be served where the portal's cookies are sent (docs/workspaces.md,
    "Who may open it"). An error: ``migrate`` and ``runserver`` stop on it, before a notebook is ever served."""
    return [checks.Error(problem, hint="Serve workspaces under a domain of their own, e.g. notebooks.example.com "
                                       "(docs/workspaces.md, Setting up the ingress).", id="slipway.E004")
            for problem in host_problems(settings.SLIPWAY_WORKSPACE_HOST, settings.SLIPWAY_PORTAL_URL,
                                         (settings.SESSION_COOKIE_DOMAIN, settings.CSRF_COOKIE_DOMAIN))]
