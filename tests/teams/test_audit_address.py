"""Audit events record the client's address for every action, whichever service writes them.

Workload actions (submit, cancel, endpoint delete) were audited without one from the portal's
forms and the API alike; tokens, logins and team changes passed it by hand. The address is the
one :func:`teams.services.client_ip` derives (``SLIPWAY_TRUSTED_PROXIES`` respected).
"""

from __future__ import annotations

import pytest

from inference import services as endpoints
from jobs.models import TrainingRun
from teams.models import AuditEvent
from teams.services import audit
from tests.inference.conftest import endpoint_payload
from tests.jobs.conftest import run_payload, submit_run_as
from tests.jobs.test_views import form_data

pytestmark = pytest.mark.django_db

Action = AuditEvent.Action


def address(action: str) -> str | None:
    return AuditEvent.objects.filter(action=action).latest("pk").ip_address


def test_a_run_submitted_and_cancelled_in_the_portal_records_the_clients_address(client, member, team, quota,
                                                                                  published):
    client.force_login(member)
    assert client.post("/runs/new/", form_data(), REMOTE_ADDR="203.0.113.7").status_code == 302
    assert address("run_submitted") == "203.0.113.7"
    run = TrainingRun.objects.get()
    client.post(f"/runs/{run.pk}/cancel/", REMOTE_ADDR="203.0.113.8")
    assert address("run_cancelled") == "203.0.113.8"


def test_an_endpoint_deleted_in_the_portal_records_the_clients_address(client, member, team, ep_quota, published):
    ep = endpoints.create_endpoint(member, team, endpoint_payload())
    client.force_login(member)
    client.post(f"/endpoints/{ep.pk}/delete/", REMOTE_ADDR="2001:db8::5")
    assert address("endpoint_deleted") == "2001:db8::5"


def test_behind_a_trusted_proxy_it_records_the_address_the_proxy_saw(client, member, team, quota, published,
                                                                     settings):
    settings.SLIPWAY_TRUSTED_PROXIES = 1
    client.force_login(member)
    client.post("/runs/new/", form_data(), REMOTE_ADDR="10.0.0.2",
                HTTP_X_FORWARDED_FOR="6.6.6.6, 198.51.100.9")  # the first hop is the client's own claim
    assert address("run_submitted") == "198.51.100.9"


def test_the_api_records_it_too(api, member, team, quota, published):
    assert api.post("/api/v1/runs/", run_payload(), format="json", REMOTE_ADDR="192.0.2.44").status_code == 201
    assert address("run_submitted") == "192.0.2.44"


def test_events_written_outside_a_request_record_none(client, member, team, quota, published):
    client.force_login(member)
    client.post("/runs/new/", form_data(), REMOTE_ADDR="203.0.113.7")
    # After the request the address is gone: a worker's or the reconciler's own event has none.
    assert audit(Action.BUDGET_ALERT, team=team, target="budget 2026-11").ip_address is None
    submit_run_as(member, team, name="from-a-shell")
    assert address("run_submitted") is None
