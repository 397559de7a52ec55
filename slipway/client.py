"""Python client of Slipway's REST API (docs/api.md): ``Client(url, token)``; the ``slipway`` command uses it.

Every method is one API call, an iteration over pages (:meth:`Client.runs`, :meth:`Client.endpoints`)
or a loop of calls that follows something (:meth:`Client.log_lines`, :meth:`Client.watch_run`,
:meth:`Client.wait_for_device_token`); it returns the API's JSON as plain dicts (the ``Run``,
``Endpoint``… aliases name which schema of ``/api/schema/``), and raises one :class:`ApiError`
subclass per kind of refusal, carrying the API's
``{"errors": {field: [messages]}}`` so callers can name the field. Reads are retried with
backoff on network errors and 502/503/504; writes never are (a resent submission could start
a second run), and a submission sends an ``Idempotency-Key`` so that a retry the *caller*
makes with the same key returns the first run instead of creating another. A 429 is retried,
after its ``Retry-After``, for a read and for a write that carries an ``Idempotency-Key``: the server
refused it before doing anything, and the key would make a second copy harmless anyway. An answer
that is not the API's JSON (a redirect, a proxy's HTML page) is :class:`NotJson`, naming the URL.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

#: Network failures and gateway answers retried for reads, with this backoff (seconds) between tries.
READ_BACKOFF = (0.5, 1.0, 2.0)
RETRIED_STATUSES = frozenset({502, 503, 504})
#: The longest ``Retry-After`` of a 429 the client waits out by itself (seconds); a longer one is the caller's.
MAX_RETRY_AFTER = 60.0
#: RFC 8628's grant type, for :meth:`Client.wait_for_device_token`.
DEVICE_GRANT_TYPE = "urn:ietf:params:oauth:grant-type:device_code"
#: The states a sweep never leaves (docs/sweeps.md "The driver"): :meth:`Client.watch_sweep` stops at them.
SWEEP_FINAL_STATES = frozenset({"completed", "stopped"})

#: The API's objects, as the schemas of the same name in ``/api/schema/`` describe them.
Run = dict[str, Any]
Endpoint = dict[str, Any]
Workspace = dict[str, Any]
Team = dict[str, Any]
ApiKey = dict[str, Any]
Reservation = dict[str, Any]
Flavor = dict[str, Any]
Cluster = dict[str, Any]
UsageRow = dict[str, Any]
AlertRules = dict[str, Any]
Preview = dict[str, Any]
Checkpoint = dict[str, Any]
Metrics = dict[str, Any]
Sweep = dict[str, Any]
SweepShape = dict[str, Any]
SweepTrial = dict[str, Any]
#: How the client waits between polls (``time.sleep`` unless the caller passes its own).
Wait = Callable[[float], None]


class ApiError(Exception):
    """A refusal of the API: ``status`` and ``errors`` (``{field: [messages]}``) as it sent them."""

    def __init__(self, message: str, status: int | None = None, errors: dict[str, list[str]] | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.errors = errors or {}
        #: An OAuth error code (``auth/token/``: ``authorization_pending``, ``access_denied``…), else None.
        self.code = code


class ConnectionFailed(ApiError):
    """The server could not be reached (after the retries, for a read)."""


class NotJson(ApiError):
    """A 1xx-3xx answer that is not the API's JSON: a redirect (``location`` says where), a proxy's or a sign-in
    page's HTML. ``url`` is the address asked."""

    def __init__(self, message: str, status: int, url: str, location: str | None = None) -> None:
        super().__init__(message, status)
        self.url, self.location = url, location


class BadRequest(ApiError):
    """400 (a reused Idempotency-Key too; older servers answered it 422): ``errors`` names the fields."""


class NotSignedIn(ApiError):
    """401: no token or a token that is no longer valid."""


class Forbidden(ApiError):
    """403: the caller's role is too low for this."""


class NotFound(ApiError):
    """404: no such object, or one of a team the caller is not in."""


class Conflict(ApiError):
    """409: the object's state does not allow it (e.g. cancelling a finished run)."""


class Ambiguous(ApiError):
    """A name that more than one of the caller's runs (or endpoints) carries and none stands out: ``candidates``."""

    def __init__(self, message: str, candidates: list[dict]) -> None:
        super().__init__(message)
        self.candidates = candidates


class DeviceLoginFailed(ApiError):
    """The browser sign-in ended without a token: denied, expired, or its code unknown (``code`` says which)."""


class RateLimited(ApiError):
    """429: too many requests; ``retry_after`` in seconds when the server said."""

    retry_after: float | None = None


_BY_STATUS: dict[int, type[ApiError]] = {400: BadRequest, 401: NotSignedIn, 403: Forbidden, 404: NotFound,
                                         409: Conflict, 422: BadRequest, 429: RateLimited}


def error_lines(errors: dict[str, Any]) -> list[str]:
    """``field: message`` lines of the API's error shape (``detail`` and ``non_field_errors`` unprefixed)."""
    lines = []
    for field, messages in errors.items():
        for message in messages if isinstance(messages, list) else [messages]:
            lines.append(str(message) if field in ("detail", "non_field_errors") else f"{field}: {message}")
    return lines


#: The most lines ``logs/`` answers at once (its ``tail`` maximum).
MAX_TAIL = 5000


def new_lines(before: list[str], now: list[str]) -> list[str]:
    """The lines of ``now`` not yet shown: both are tail windows of one growing log."""
    for skipped in range(len(before) + 1):
        overlap = before[skipped:]
        if now[:len(overlap)] == overlap:
            return now[len(overlap):]
    return now


def _error_for(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    errors = body.get("errors") if isinstance(body, dict) else None
    if not isinstance(errors, dict):
        errors = {"detail": [str(body.get("detail", response.reason_phrase))]} if isinstance(body, dict) and body.get(
            "detail") else {"detail": [f"{response.status_code} {response.reason_phrase}"]}
    cls = _BY_STATUS.get(response.status_code, ApiError)
    message = "not signed in: run `slipway login`" if cls is NotSignedIn else "; ".join(error_lines(errors))
    code = body.get("error") if isinstance(body, dict) and isinstance(body.get("error"), str) else None
    error = cls(message, response.status_code, errors, code)
    if isinstance(error, RateLimited):
        error.retry_after = retry_after(response)
    return error


def id_in(ref: str) -> int | None:
    """The id ``ref`` writes — ASCII digits, at most 19 (an id has no more) — else None: it is a name.

    ``isdigit()`` alone takes "²", which int() refuses, and int() refuses 5,000 digits: both were a traceback. The
    server's :func:`core.text.whole_number` is the same rule; the command line imports no project package."""
    return int(ref) if ref.isascii() and ref.isdigit() and len(ref) <= 19 else None


def retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (RFC 9110: a number of seconds or an HTTP date), None when absent or unreadable."""
    value = response.headers.get("Retry-After", "").strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _not_json(response: httpx.Response, base: str) -> NotJson:
    """What a 1xx-3xx answer that is not JSON says: where a redirect points (and the address to use instead, when
    the redirect keeps the API's path), or what came instead of JSON."""
    asked = str(response.request.url)
    status = f"{response.status_code} {response.reason_phrase}".strip()
    location = response.headers.get("Location")
    if response.is_redirect and location:
        target = str(response.request.url.join(location))
        below = asked[len(base):] if asked.startswith(base) else ""
        use = target[:-len(below)] if below and target.endswith(below) else target
        return NotJson(f"{asked} answered {status}, a redirect to {target}, not the API's JSON: use {use} as the "
                       "URL (--url, SLIPWAY_URL or the profile's)", response.status_code, asked, target)
    kind = response.headers.get("Content-Type", "").split(";")[0].strip() or "no content type"
    return NotJson(f"{asked} answered {status} with {kind}, not the API's JSON: is {base} Slipway's address (not a "
                   "proxy's or a sign-in page)? Check --url, SLIPWAY_URL or the profile's", response.status_code,
                   asked)


class Client:
    """The REST API at ``url`` (the portal's address, e.g. ``https://slipway.example.com``) as ``token``."""

    def __init__(self, url: str, token: str | None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None, backoff: tuple[float, ...] = READ_BACKOFF,
                 wait: Wait = time.sleep) -> None:
        headers = {"Accept": "application/json", "User-Agent": "slipway-cli"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.url = url.rstrip("/")
        self.backoff = backoff
        self.timeout = timeout
        #: How the client waits before a retry (a test passes its own: no sleeping).
        self.wait = wait
        self._http = httpx.Client(base_url=f"{self.url}/api/v1/", headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------------
    def _request(self, method: str, path: str, *, params: dict | None = None, json: Any = None,
                 headers: dict | None = None, expect_json: bool = True) -> httpx.Response:
        """One call, retried as the module docstring says; a refusal is its :class:`ApiError`, and an answer
        that should be JSON and is not (``expect_json``; a 204 has no body) is :class:`NotJson`."""
        reading = method == "GET"
        keyed = "Idempotency-Key" in (headers or {})
        # None, not {}: httpx would replace the query of a full URL (a page's ``next``) with an empty one.
        params = {k: v for k, v in (params or {}).items() if v is not None} or None
        for attempt in range(len(self.backoff) + 1):
            pause = self.backoff[attempt] if attempt < len(self.backoff) else None
            try:
                response = self._http.request(method, path, params=params, json=json, headers=headers)
            except httpx.TransportError as exc:
                if not reading or pause is None:
                    raise self._unreachable(exc) from exc
            else:
                pause = self._retry_pause(response, pause, reading=reading, keyed=keyed)
                if pause is None:
                    break
            self.wait(pause)
        if response.status_code >= 400:
            raise _error_for(response)
        if expect_json and response.status_code != 204:  # 204: No Content, the API's answer to a delete
            try:
                response.json()
            except ValueError:
                raise _not_json(response, self.url) from None
        return response

    def _unreachable(self, exc: httpx.TransportError) -> ConnectionFailed:
        if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
            return ConnectionFailed(f"{self.url} did not answer within {self.timeout:g} s ({type(exc).__name__})")
        return ConnectionFailed(f"cannot reach {self.url} ({exc}): check the address (--url, SLIPWAY_URL or the "
                                "profile's) and the network")

    @staticmethod
    def _retry_pause(response: httpx.Response, pause: float | None, *, reading: bool, keyed: bool) -> float | None:
        """How long to wait before sending ``response``'s request again, None to keep the answer: a read's gateway
        error waits the backoff; a 429 of a read or of a write with an ``Idempotency-Key`` its ``Retry-After`` (the
        backoff if it names none), unless that is past :data:`MAX_RETRY_AFTER`."""
        if pause is None:
            return None
        if response.status_code in RETRIED_STATUSES and reading:
            return pause
        if response.status_code == 429 and (reading or keyed):
            after = retry_after(response)
            if after is None:
                return pause
            return after if after <= MAX_RETRY_AFTER else None
        return None

    def _get(self, path: str, **params) -> Any:
        return self._request("GET", path, params=params).json()

    def _pages(self, path: str, **params) -> Iterator[dict]:
        """Every result of a paginated list, page after page (the API's ``next`` links), each once.

        The API's pages are numbered: an object created while the pages are read pushes the others down a
        place, and the last of a page comes again first on the next. An id already yielded is skipped.
        """
        page = self._get(path, **params)
        seen: set = set()
        while True:
            for item in page["results"]:
                ident = item.get("id") if isinstance(item, dict) else None
                if ident is not None:
                    if ident in seen:
                        continue
                    seen.add(ident)
                yield item
            if not page.get("next"):
                return
            response = self._request("GET", page["next"])
            page = response.json()

    def workload_id(self, collection: str, ref: str | int, noun: str) -> int:
        """The id of the run (``collection`` ``"runs/"``) or endpoint (``"endpoints/"``) that ``ref`` names: an id
        as it is, else a name looked up in the caller's teams (``?name=``).

        Names are unique among a team's live work only, so a name may be carried by ended work too, and by work
        of another of the caller's teams: the one match, else the one not ended (``is_final``), else
        :class:`Ambiguous` listing them all (id, team, state), newest first; none is :class:`NotFound`.
        """
        if isinstance(ref, int):
            return ref
        if (number := id_in(str(ref))) is not None:
            return number
        found = list(self._pages(collection, name=ref))
        live = [item for item in found if not item.get("is_final")]
        if len(found) == 1 or len(live) == 1:
            return (found if len(found) == 1 else live)[0]["id"]
        if not found:
            raise NotFound(f"no {noun} named {ref} in your teams", status=404)
        listed = "; ".join(f"{item['id']} (team {item['team']}, {item['state']})" for item in found)
        raise Ambiguous(f"{len(found)} {noun}s are named {ref} in your teams: {listed}. Give the id instead.", found)

    # -- any kind's collection ("workspaces/"): what every kind's API answers alike -------------------
    # A kind's own methods below name these; a kind's module of verbs may call them directly (a kind made by
    # ``manage.py startkind`` does: its verbs need no method of their own here).
    def create_workload(self, collection: str, spec: dict, *, idempotency_key: str | None = None) -> dict:
        """Create one in ``collection``; the same ``idempotency_key`` again returns the first (a fresh key if none)."""
        key = idempotency_key or str(uuid.uuid4())
        return self._request("POST", collection, json=spec, headers={"Idempotency-Key": key}).json()

    def preview_workload(self, collection: str, spec: dict) -> Preview:
        """What creating ``spec`` in ``collection`` would do now (the dry run); writes nothing."""
        return self._request("POST", collection, params={"dry_run": "1"}, json=spec).json()

    def workloads(self, collection: str, *, team: str | None = None, state: str | None = None,
                  page_size: int | None = None) -> Iterator[dict]:
        return self._pages(collection, team=team, state=state, page_size=page_size)

    def workload(self, collection: str, workload_id: int) -> dict:
        return self._get(f"{collection}{int(workload_id)}/")

    def delete_workload(self, collection: str, workload_id: int) -> dict:
        """Its end through ``DELETE`` (the kinds whose end is a delete)."""
        return self._request("DELETE", f"{collection}{int(workload_id)}/").json()

    # -- signing in ---------------------------------------------------------------------------
    def start_device_login(self, client_name: str = "") -> dict:
        """Start a browser sign-in (RFC 8628): ``device_code``, ``user_code``, ``verification_uri(_complete)``,
        ``expires_in``, ``interval``. Needs no token."""
        return self._request("POST", "auth/device/", json={"client_name": client_name}).json()

    def wait_for_device_token(self, grant: dict, *, wait: Wait = time.sleep) -> dict:
        """Poll ``auth/token/`` as RFC 8628 says until the person decides: ``{"access_token", "token_type", "expires_in"}``.

        Waits ``interval`` before each poll and 5 s more after each ``slow_down``; raises
        :class:`DeviceLoginFailed` when the sign-in is denied or expires (``code`` says which).
        """
        interval = float(grant.get("interval") or 5)
        body = {"grant_type": DEVICE_GRANT_TYPE, "device_code": grant["device_code"]}
        while True:
            wait(interval)
            try:
                return self._request("POST", "auth/token/", json=body).json()
            except BadRequest as exc:
                if exc.code == "authorization_pending":
                    continue
                if exc.code == "slow_down":
                    interval += 5
                    continue
                raise DeviceLoginFailed(str(exc), exc.status, exc.errors, exc.code) from exc

    # -- teams, flavors, money ---------------------------------------------------------------
    def teams(self) -> list[Team]:
        return list(self._pages("teams/"))

    def flavors(self) -> list[Flavor]:
        return list(self._pages("flavors/"))

    def clusters(self) -> list[Cluster]:
        """Every cluster with what it offers and its elastic pools (platform staff; anyone else: :class:`NotFound`)."""
        return self._get("clusters/")

    def team_usage(self, team: str) -> dict:
        """Quotas and budget of ``team`` (``{"quotas": [...], "budget": {...}}``)."""
        return self._get(f"teams/{team}/usage/")

    def alert_rules(self, team: str) -> AlertRules:
        """``team``'s alert rules: ``{"team": {...}, "platform": {...}, "effective": {...}}``."""
        return self._get(f"teams/{team}/alerts/")

    def set_alert_rules(self, team: str, changes: dict[str, float | int | None]) -> AlertRules:
        """Tighten some of ``team``'s alert rules (its admins); None gives one back to the platform's. A looser
        value is a :class:`BadRequest` naming the field."""
        return self._request("PATCH", f"teams/{team}/alerts/", json=changes).json()

    def usage_report(self, *, team: str | None = None, since: str | None = None, until: str | None = None,
                     group_by: str | None = None) -> list[UsageRow]:
        """The cost report: rows ``{"group", "gpu_hours", "cost", ...}`` (money in cents)."""
        return list(self._pages("usage/", team=team, since=since, until=until, group_by=group_by))

    # -- runs --------------------------------------------------------------------------------
    def submit_run(self, spec: dict, *, idempotency_key: str | None = None) -> Run:
        """Submit a run; the same ``idempotency_key`` again returns the first run (a fresh key if none)."""
        key = idempotency_key or str(uuid.uuid4())
        return self._request("POST", "runs/", json=spec, headers={"Idempotency-Key": key}).json()

    def dry_run(self, spec: dict) -> Preview:
        """What submitting ``spec`` would do now (admission outcome, cost, estimated start); writes nothing."""
        return self.preview_workload("runs/", spec)

    def runs(self, *, team: str | None = None, state: str | None = None, created_by: str | None = None,
             all_teams: bool = False, page_size: int | None = None) -> Iterator[Run]:
        """The caller's teams' runs, newest first, over every page (``all_teams``: every team's; staff only)."""
        return self._pages("runs/", team=team, state=state, created_by=created_by,
                           all_teams="true" if all_teams else None, page_size=page_size)

    def run(self, run_id: int) -> Run:
        return self._get(f"runs/{int(run_id)}/")

    def watch_run(self, run_id: int, *, interval: float = 2.0, wait: Wait = time.sleep) -> Iterator[Run]:
        """The run at each poll, ``interval`` apart, until (and including) the poll that finds it ended."""
        while True:
            current = self.run(run_id)
            yield current
            if current["is_final"]:
                return
            wait(interval)

    def cancel_run(self, run_id: int) -> Run:
        return self._request("POST", f"runs/{int(run_id)}/cancel/").json()

    def logs(self, run_id: int, *, tail: int | None = None, pod: str | None = None,
             attempt: int | None = None) -> dict:
        """``{"lines", "pod", "pods", "attempt", "saved_at"}``: the run's default pod, or ``pod``, of its
        current attempt, or of ``attempt`` (an earlier one's logs are those saved as its pods stopped)."""
        return self._get(f"runs/{int(run_id)}/logs/", tail=tail, pod=pod, attempt=attempt)

    def log_lines(self, run_id: int, *, tail: int = 200, pod: str | None = None, follow: bool = False,
                  interval: float = 2.0, wait: Wait = time.sleep, attempt: int | None = None) -> Iterator[str]:
        """The last ``tail`` lines of the run's log; with ``follow``, then each new line until the run ends.

        The API answers tail windows; the lines new since the last window are told apart by
        their overlap (:func:`new_lines`), so a line printed twice is still shown twice.
        ``attempt``: an earlier attempt's (its saved lines do not change: never with ``follow``).
        """
        # Following, every window is the largest: windows of one size only move forward, which
        # is what telling the new lines by the overlap needs.
        shown = self.logs(run_id, tail=MAX_TAIL if follow else tail, pod=pod, attempt=attempt)["lines"]
        yield from shown[-tail:]
        ended = not follow
        while not ended:
            ended = self.run(run_id)["is_final"]
            if not ended:
                wait(interval)
            latest = self.logs(run_id, tail=MAX_TAIL, pod=pod)["lines"]
            if not latest:
                # No lines while the cluster is away (or the pod is between attempts): not a log emptied. The last
                # window shown stays the one the next is compared with, so only its new lines are printed.
                continue
            yield from new_lines(shown, latest)
            shown = latest

    def report_checkpoint(self, run_id: int, step: int, path: str) -> Checkpoint:
        """Record the run's newest checkpoint (as its run token, or as a member of its team): ``{"at", "step", "path"}``."""
        return self._request("POST", f"runs/{int(run_id)}/checkpoints/", json={"step": step, "path": path}).json()

    def metrics(self, run_id: int, *, names: list[str] | None = None, since_step: int | None = None,
                limit: int | None = None) -> Metrics:
        """``{"names", "series": {name: [[step, value], …]}, "progress"}``: at most ``limit`` points of each
        name, the first after ``since_step`` (docs/metrics.md)."""
        return self._get(f"runs/{int(run_id)}/metrics/", name=names or None, since_step=since_step, limit=limit)

    def all_metrics(self, run_id: int, *, names: list[str] | None = None, since_step: int | None = None,
                    page: int = 10_000) -> Metrics:
        """Every point after ``since_step``, read a page of ``page`` points of each name at a time; the
        progress of the last read."""
        answer = self.metrics(run_id, names=names, since_step=since_step, limit=page)
        series = {name: list(points) for name, points in answer["series"].items()}
        while any(len(points) == page for points in answer["series"].values()):
            last = min(points[-1][0] for points in answer["series"].values() if len(points) == page)
            answer = self.metrics(run_id, names=names, since_step=int(last), limit=page)
            for name, points in answer["series"].items():
                known = series.setdefault(name, [])
                known += [p for p in points if not known or p[0] > known[-1][0]]
        return {**answer, "series": series}

    def events(self, run_id: int) -> list[dict]:
        return self._get(f"runs/{int(run_id)}/events/")

    def preemptions(self, run_id: int) -> list[dict]:
        """The run's preemption log, newest first (who took back which units, the work it cost)."""
        return self._get(f"runs/{int(run_id)}/preemptions/")

    # -- endpoints ---------------------------------------------------------------------------
    def create_endpoint(self, spec: dict, *, idempotency_key: str | None = None) -> Endpoint:
        key = idempotency_key or str(uuid.uuid4())
        return self._request("POST", "endpoints/", json=spec, headers={"Idempotency-Key": key}).json()

    def dry_run_endpoint(self, spec: dict) -> Preview:
        """What creating the endpoint would do now (its minimum's admission, costs, burst); writes nothing."""
        return self._request("POST", "endpoints/", params={"dry_run": "1"}, json=spec).json()

    def endpoints(self, *, team: str | None = None, state: str | None = None, all_teams: bool = False,
                  page_size: int | None = None) -> Iterator[Endpoint]:
        return self._pages("endpoints/", team=team, state=state, all_teams="true" if all_teams else None,
                           page_size=page_size)

    def endpoint(self, endpoint_id: int) -> Endpoint:
        return self._get(f"endpoints/{int(endpoint_id)}/")

    def scale_endpoint(self, endpoint_id: int, *, min_replicas: int | None = None,
                       max_replicas: int | None = None) -> Endpoint:
        """PATCH the replica bounds (a higher minimum must fit the quota now, else :class:`BadRequest`)."""
        body = {k: v for k, v in {"min_replicas": min_replicas, "max_replicas": max_replicas}.items() if v is not None}
        return self._request("PATCH", f"endpoints/{int(endpoint_id)}/", json=body).json()

    def delete_endpoint(self, endpoint_id: int) -> Endpoint:
        return self._request("DELETE", f"endpoints/{int(endpoint_id)}/").json()

    def revisions(self, endpoint_id: int) -> Iterator[dict]:
        """The endpoint's revisions, newest first, with their traffic over the last 5 minutes."""
        return self._pages(f"endpoints/{int(endpoint_id)}/revisions/")

    def rollout(self, endpoint_id: int, body: dict) -> dict:
        """A new revision (``image``, ``command``, ``args``, ``env``) by ``strategy``: replace or canary at ``weight``."""
        return self._request("POST", f"endpoints/{int(endpoint_id)}/rollout/", json=body).json()

    def promote(self, endpoint_id: int) -> dict:
        """Promote the canary (:class:`Conflict` when there is none)."""
        return self._request("POST", f"endpoints/{int(endpoint_id)}/promote/").json()

    def rollback(self, endpoint_id: int) -> dict:
        """Roll the canary back (:class:`Conflict` when there is none)."""
        return self._request("POST", f"endpoints/{int(endpoint_id)}/rollback/").json()

    def traffic(self, endpoint_id: int, *, since: str | None = None, step: int | None = None,
                revision: int | None = None) -> dict:
        """The endpoint's traffic figures per point (docs/api.md "Endpoint traffic")."""
        return self._get(f"endpoints/{int(endpoint_id)}/traffic/", since=since, step=step, revision=revision)

    def cold_starts(self, endpoint_id: int, *, limit: int | None = None) -> dict:
        """The endpoint's newest cold-start timelines and its figures per stage."""
        return self._get(f"endpoints/{int(endpoint_id)}/cold-starts/", limit=limit)

    # -- workspaces ---------------------------------------------------------------------------
    # -- API keys of endpoints (an endpoint's, or with ``team`` the team's) ---------------------------------
    @staticmethod
    def _keys_path(endpoint_id: int | None, team: str | None) -> str:
        return f"teams/{team}/keys/" if team else f"endpoints/{int(endpoint_id)}/keys/"

    def create_key(self, name: str, *, endpoint_id: int | None = None, team: str | None = None,
                   expires_at: str | None = None, requests_per_minute: int | None = None,
                   tokens_per_minute: int | None = None) -> ApiKey:
        """A new key (its ``key`` is in this answer only): for the endpoint, or with ``team`` for every endpoint
        of the team."""
        body = {"name": name, "expires_at": expires_at, "requests_per_minute": requests_per_minute,
                "tokens_per_minute": tokens_per_minute}
        return self._request("POST", self._keys_path(endpoint_id, team),
                             json={k: v for k, v in body.items() if v is not None}).json()

    def keys(self, *, endpoint_id: int | None = None, team: str | None = None) -> list[ApiKey]:
        return list(self._pages(self._keys_path(endpoint_id, team)))

    def revoke_key(self, key_id: int, *, endpoint_id: int | None = None, team: str | None = None) -> None:
        self._request("DELETE", f"{self._keys_path(endpoint_id, team)}{int(key_id)}/")

    def set_key_disabled(self, key_id: int, disabled: bool, *, endpoint_id: int | None = None,
                         team: str | None = None) -> ApiKey:
        verb = "disable" if disabled else "enable"
        return self._request("POST", f"{self._keys_path(endpoint_id, team)}{int(key_id)}/{verb}/").json()

    def key_usage(self, *, endpoint_id: int | None = None, team: str | None = None, since: str | None = None,
                  until: str | None = None, csv: bool = False) -> dict | str:
        """Usage and cost per key (JSON), or the hours as CSV text."""
        response = self._request("GET", f"{self._keys_path(endpoint_id, team)}usage/",
                                 params={"since": since, "until": until, "format": "csv" if csv else None},
                                 expect_json=not csv)
        return response.text if csv else response.json()

    def create_workspace(self, spec: dict, *, idempotency_key: str | None = None) -> Workspace:
        return self.create_workload("workspaces/", spec, idempotency_key=idempotency_key)

    def workspaces(self, *, team: str | None = None, state: str | None = None,
                   page_size: int | None = None) -> Iterator[Workspace]:
        return self.workloads("workspaces/", team=team, state=state, page_size=page_size)

    def workspace(self, workspace_id: int) -> Workspace:
        return self.workload("workspaces/", workspace_id)

    def open_workspace(self, workspace_id: int) -> str:
        """Where its Jupyter server is, for this caller (its owner, or an admin it is shared with)."""
        return self._get(f"workspaces/{int(workspace_id)}/open/")["url"]

    def pause_workspace(self, workspace_id: int) -> Workspace:
        return self._request("POST", f"workspaces/{int(workspace_id)}/pause/").json()

    def resume_workspace(self, workspace_id: int) -> Workspace:
        return self._request("POST", f"workspaces/{int(workspace_id)}/resume/").json()

    def delete_workspace(self, workspace_id: int) -> Workspace:
        return self.delete_workload("workspaces/", workspace_id)

    # -- reservations (docs/api.md "Reservations") ---------------------------------------------------
    def create_reservation(self, spec: dict, *, idempotency_key: str | None = None) -> Reservation:
        """Book ``spec``; the same ``idempotency_key`` again returns the first booking (a fresh key if none)."""
        key = idempotency_key or str(uuid.uuid4())
        return self._request("POST", "reservations/", json=spec, headers={"Idempotency-Key": key}).json()

    def dry_run_reservation(self, spec: dict) -> dict:
        """What booking ``spec`` would be now, checked as a booking is, writing nothing: ``cluster``, ``units``,
        ``state``, ``windows``, ``unit_hours``, ``price_per_unit_hour``, ``price``, ``currency``."""
        return self._request("POST", "reservations/", params={"dry_run": "1"}, json=spec).json()

    def reservations(self, *, team: str | None = None, state: str | None = None) -> Iterator[Reservation]:
        return self._pages("reservations/", team=team, state=state)

    def cancel_reservation(self, reservation_id: int) -> None:
        self._request("DELETE", f"reservations/{int(reservation_id)}/")

    def availability(self, flavor: str, *, cluster: str | None = None, since: str | None = None,
                     until: str | None = None) -> list[dict]:
        """Free reservable units per 30-minute slot: ``{"start", "end", "cluster", "free_units"}``."""
        return self._get("reservations/availability/", flavor=flavor, cluster=cluster, **{"from": since, "to": until})

    # -- sweeps (docs/sweeps.md, docs/api.md "Sweeps") ---------------------------------------------
    def create_sweep(self, spec: dict, *, idempotency_key: str | None = None) -> Sweep:
        """Create a sweep from its file's fields (``team`` among them); its first trials launch at once. The same
        ``idempotency_key`` again returns the first sweep (a fresh key if none)."""
        key = idempotency_key or str(uuid.uuid4())
        return self._request("POST", "sweeps/", json=spec, headers={"Idempotency-Key": key}).json()

    def dry_run_sweep(self, spec: dict) -> SweepShape:
        """The sweep's shape before anything runs: ``trials``, ``parallel``, ``sampler``, ``pruner``, ``rungs``
        (ASHA's ``{"steps", "trials"}``), ``trial`` (the first trial's preview with a whole trial's ``cost`` and
        ``gpu_hours``), ``cost`` and ``gpu_hours`` (``{"low", "high"}``), the caps and ``trials_within_cap``;
        writes nothing."""
        return self._request("POST", "sweeps/", params={"dry_run": "1"}, json=spec).json()

    def sweeps(self, *, team: str | None = None, state: str | None = None) -> Iterator[Sweep]:
        """The caller's teams' sweeps, newest first, over every page (a list's rows: without their figures)."""
        return self._pages("sweeps/", team=team, state=state)

    def sweep(self, sweep_id: int) -> Sweep:
        """A sweep with its figures: ``trials`` by state, ``best_trial``, ``spend``."""
        return self._get(f"sweeps/{int(sweep_id)}/")

    def sweep_trials(self, sweep_id: int) -> list[SweepTrial]:
        """Its trials in order: parameters, state, objective, cost, their run's id and state."""
        return self._get(f"sweeps/{int(sweep_id)}/trials/")

    def watch_sweep(self, sweep_id: int, *, interval: float = 5.0,
                    wait: Wait = time.sleep) -> Iterator[tuple[Sweep, list[SweepTrial]]]:
        """The sweep and its trials at each poll, ``interval`` apart, until (and including) the poll that finds it
        ended (:data:`SWEEP_FINAL_STATES`)."""
        while True:
            current = self.sweep(sweep_id)
            yield current, self.sweep_trials(sweep_id)
            if current["state"] in SWEEP_FINAL_STATES:
                return
            wait(interval)

    def continue_trial(self, sweep_id: int, number: int) -> SweepTrial:
        """Continue pruned trial ``number`` from its checkpoint: the new trial (:class:`Conflict`, with why, when it
        cannot be continued)."""
        return self._request("POST", f"sweeps/{int(sweep_id)}/trials/{int(number)}/continue/").json()

    def stop_sweep(self, sweep_id: int) -> Sweep:
        """Stop it: nothing launches any more, its active trials stop (:class:`Conflict` when it is not running)."""
        return self._request("POST", f"sweeps/{int(sweep_id)}/stop/").json()

    def delete_sweep(self, sweep_id: int) -> None:
        """Delete a finished sweep and its study; its trials' runs stay the team's (:class:`Conflict` while live)."""
        self._request("DELETE", f"sweeps/{int(sweep_id)}/")
