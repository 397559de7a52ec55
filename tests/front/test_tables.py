"""Every table of the portal sits directly in a ``.table-scroll`` box, so it scrolls on a narrow screen."""

from __future__ import annotations

from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.utils import timezone

from inference import services as endpoint_services
from inference.models import ScalingEvent
from jobs import services as run_services
from jobs.constants import RunState
from jobs.models import TrainingRun
from teams.services import create_api_token
from tests.fakes import pod
from tests.inference.conftest import endpoint_payload
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class TableParents(HTMLParser):
    """The classes of each table's parent element, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, set[str]]] = []
        self.parents: list[set[str]] = []

    def handle_starttag(self, tag, attrs):
        classes = set((dict(attrs).get("class") or "").split())
        if tag == "table":
            self.parents.append(self.stack[-1][1] if self.stack else set())
        if tag not in VOID:
            self.stack.append((tag, classes))

    def handle_endtag(self, tag):
        # Pop to the matching open tag (browsers' tolerance of unclosed <p>, <li>, <td>…).
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                return


def table_parents(html: str) -> list[set[str]]:
    parser = TableParents()
    parser.feed(html)
    return parser.parents


def test_the_checker_tells_a_wrapped_table_from_a_bare_one():
    html = '<div class="card"><div class="table-scroll"><table><tr><td>a</td></tr></table></div><p>x<table></table></div>'
    assert [("table-scroll" in classes) for classes in table_parents(html)] == [True, False]


@pytest.fixture
def pages(member, team, quota, ep_quota, published, fake_backend):
    """The portal pages that show tables, each with rows to show."""
    run = run_services.submit_run(member, team, {k: v for k, v in run_payload().items() if k != "team"})
    now = timezone.now()
    TrainingRun.objects.filter(pk=run.pk).update(state=RunState.RUNNING, applied_at=now, started_at=now)
    fake_backend.pod_lists[(run.namespace, run.object_name)] = [pod(run.object_name, "Running", 1)]  # events
    endpoint = endpoint_services.create_endpoint(member, team, endpoint_payload(flavor="a100-1g.10gb"))
    decision = ScalingEvent._meta.get_field("decision").choices[0][0]
    for minutes in (10, 5):
        ScalingEvent.objects.create(endpoint=endpoint, at=now - timedelta(minutes=minutes), replicas=1,
                                    desired_replicas=2, replica_ceiling=2, metric_value=80.0, decision=decision)
    create_api_token(member, "ci")
    return {"/": 2, "/runs/": 1, f"/runs/{run.pk}/": 1, "/endpoints/": 1, f"/endpoints/{endpoint.pk}/": 2,
            "/tokens/": 1}


def test_every_portal_table_scrolls_on_narrow_screens(client, member, pages):
    client.force_login(member)
    for url, at_least in pages.items():
        response = client.get(url)
        assert response.status_code == 200, url
        parents = table_parents(response.content.decode())
        assert len(parents) >= at_least, (url, len(parents))
        assert all("table-scroll" in classes for classes in parents), (url, parents)


def test_slipways_admin_tables_scroll(client, staff, flavors):
    """Our admin pages (the admin's own app lists are Django's)."""
    client.force_login(staff)
    index = client.get("/admin/").content.decode()
    assert "css/slipway-admin.css" in index and '<div class="module table-scroll" id="slipway-platform">' in index
    capacity = client.get("/admin/capacity/")
    assert capacity.status_code == 200 and "css/slipway-admin.css" in capacity.content.decode()
    # The admin's navigation sidebar lists its apps in tables of its own (class app-<label>).
    parents = [c for c in table_parents(capacity.content.decode()) if not any(n.startswith("app-") for n in c)]
    assert parents and all("table-scroll" in classes for classes in parents), parents


def test_the_stylesheet_makes_the_box_scroll():
    from django.contrib.staticfiles import finders

    for name in ("css/slipway.css", "css/slipway-admin.css"):
        with open(finders.find(name)) as css:
            assert ".table-scroll { overflow-x: auto;" in css.read(), name
