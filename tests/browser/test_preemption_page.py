"""A preempted run's page in a real browser: its state says queued and who took its units back,
and the Preemptions card lists the preemption (issue #23's browser journey, victim side).

The preemption is made by the real reclaim code (``workloads.preemption.reclaim``) on the
shared fake cluster and the real reconcile cycle; the browser only reads.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from jobs.models import TrainingRun
from jobs.services import submit_run
from teams.models import Role
from tests.browser.conftest import save_evidence
from tests.browser.support import BROWSER_MARKS, chromium_page
from tests.factories import add_member, cohort_pair, make_user
from workloads import preemption
from workloads import reconcile as rec

pytestmark = BROWSER_MARKS


def spec(name: str, gpus: int) -> dict:
    return {"name": name, "image": "registry.example.com/ml/trainer:1.4", "command": ["python", "t.py"],
            "flavor": "a100-80gb", "gpus_per_worker": gpus}


@pytest.fixture
def preempted(transactional_db, flavors, fake_backend, published):
    """Vision's borrowed run, preempted for nlp-platform and back in the queue."""
    staff = make_user("root", staff=True)
    nlp, vision = cohort_pair(staff, min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, noor = make_user("alice"), make_user("noor")
    add_member(vision, alice, Role.MEMBER)
    add_member(nlp, noor, Role.MEMBER)
    submit_run(alice, vision, spec("own", 4))
    borrowed = submit_run(alice, vision, spec("borrowed", 4))
    submit_run(noor, nlp, spec("mine", 4))
    assert preemption.reclaim(timezone.now()) == [borrowed.ref]
    rec.reconcile(fake_backend)  # its objects are gone (the fake deleted them): it queues again
    return TrainingRun.objects.get(pk=borrowed.pk)


def test_the_victims_page_says_who_took_its_units_back(live_server, preempted, monkeypatch, request):
    assert preempted.state == "queued"
    with chromium_page(monkeypatch) as page:
        page.goto(f"{live_server.url}/login/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", "pw-Slipway-123")
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/*")
        page.goto(f"{live_server.url}/runs/{preempted.pk}/")
        status = page.inner_text("#run-status")
        assert "Queued" in status
        assert "preempted: team nlp-platform reclaimed 4\u00d7 a100-80gb of its quota" in status
        card = page.inner_text("#preemptions")
        assert "nlp-platform" in card and "4\u00d7 a100-80gb" in card and "GPU-h" in card
        save_evidence(request, page)
