"""Cold-start timelines (inference.coldstarts): the attribution rule, what the cycle writes and keeps, the
gateway's first byte, the API, the endpoint page's card and the edit form's hint from the endpoint's history."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from cluster.startup import ReplicaStart
from inference import coldstarts, services
from inference.constants import COLD_START_STAGES, EndpointState, ScalingDecision
from inference.models import ColdStart, InferenceEndpoint, ScalingEvent
from tests.inference.conftest import endpoint_payload

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


#: A replica's stages, seconds after T0: scheduled 4, pulled 30, started 31, loaded 71, ready 72.
OFFSETS = {"scheduled": 4, "image_pulled": 30, "container_started": 31, "model_loaded": 71, "ready": 72}


@pytest.fixture
def endpoint(member, team, ep_quota, published) -> InferenceEndpoint:
    created = services.create_endpoint(member, team, endpoint_payload())
    InferenceEndpoint.objects.filter(pk=created.pk).update(state=EndpointState.READY, admitted_at=T0)
    return InferenceEndpoint.objects.select_related("team", "flavor").get(pk=created.pk)


def start(pod: str, created: float, **offsets: float) -> ReplicaStart:
    return ReplicaStart(pod=pod, created=at(created), revision=None,
                        stages={stage: at(seconds) for stage, seconds in offsets.items()})


def timeline_row(endpoint, pod: str, begun: float, offsets: dict, *, from_zero=False, complete=True, **extra):
    instants = {"admitted": at(begun), **{s: at(begun + o) for s, o in offsets.items()},
                **{s: at(begun + o) for s, o in extra.items()}}
    return ColdStart.objects.create(endpoint=endpoint, pod=pod, from_zero=from_zero, started_at=at(begun),
                                    stages={s: t.isoformat() for s, t in instants.items()}, complete=complete)


# -- the attribution rule --------------------------------------------------------------------------------------


def test_each_stage_takes_the_time_since_the_one_before_and_every_second_is_named():
    instants = {"admitted": at(0), **{stage: at(s) for stage, s in OFFSETS.items()}, "first_byte": at(73.5)}
    attribution = coldstarts.attribute(instants)
    assert attribution.durations == {"scheduled": 4, "image_pulled": 26, "container_started": 1,
                                     "model_loaded": 40, "ready": 1, "first_byte": 1.5}
    assert [stage for stage, _ in attribution.segments] == list(COLD_START_STAGES[1:])
    assert (attribution.elapsed, attribution.unattributed, attribution.attributed_share) == (73.5, 0, 1.0)


def test_time_before_a_stage_whose_predecessors_were_not_seen_is_unattributed():
    # No scheduled, no image pulled: 31 s led to the container's start and no stage explains how they split.
    instants = {"admitted": at(0), "container_started": at(31), "model_loaded": at(71), "ready": at(72)}
    attribution = coldstarts.attribute(instants)
    assert attribution.segments == (("unattributed", 31.0), ("model_loaded", 40.0), ("ready", 1.0))
    assert attribution.durations == {"model_loaded": 40.0, "ready": 1.0}
    assert attribution.unattributed == 31 and attribution.elapsed == 72
    assert attribution.attributed_share == pytest.approx(41 / 72)


def test_a_cluster_clock_behind_the_portals_never_makes_a_stage_negative():
    # The portal admitted at 0.6 s; the cluster, writing whole seconds, says the pod was bound at 0.
    instants = {"admitted": at(0.6), "scheduled": at(0), "image_pulled": at(9), "container_started": at(10)}
    attribution = coldstarts.attribute(instants)
    assert attribution.durations == {"scheduled": 0.0, "image_pulled": 8.4, "container_started": 1.0}
    assert attribution.elapsed == pytest.approx(sum(attribution.durations.values()))


# -- what the cycle writes -------------------------------------------------------------------------------------


def test_a_new_replica_gets_a_timeline_from_its_decision_and_each_stage_keeps_its_first_instant(endpoint):
    first = start("ep-1-a", 2, scheduled=4, image_pulled=30)
    assert coldstarts.record(endpoint, [first], at(35)) == 1
    row = ColdStart.objects.get(endpoint=endpoint)
    # Its first replica: the timeline starts at the endpoint's admission.
    assert (row.pod, row.started_at, row.revision, row.from_zero, row.complete) == ("ep-1-a", T0, 1, False, False)
    later = start("ep-1-a", 2, scheduled=9, image_pulled=31, container_started=31, model_loaded=71, ready=72)
    assert coldstarts.record(endpoint, [later], at(75)) == 0
    row.refresh_from_db()
    instants = coldstarts.instants_of(row.stages)
    # Instants already recorded stay (a re-observation cannot move them); the new stages join; ready completes it.
    assert (instants["scheduled"], instants["image_pulled"], instants["ready"]) == (at(4), at(30), at(72))
    assert row.complete


def test_a_wake_from_zero_starts_at_the_pods_creation_and_the_gateways_first_byte_completes_it(endpoint):
    InferenceEndpoint.objects.filter(pk=endpoint.pk).update(state=EndpointState.SCALED_TO_ZERO)
    endpoint.state = EndpointState.SCALED_TO_ZERO  # as the cycle read it: asleep
    coldstarts.record(endpoint, [start("ep-1-z", 500, scheduled=501), start("ep-1-y", 503)], at(504))
    row = ColdStart.objects.get(endpoint=endpoint, pod="ep-1-z")
    assert (row.from_zero, row.started_at) == (True, at(500))
    # A second pod the autoscaler added after the wake is a scale-up, from its creation.
    follower = ColdStart.objects.get(endpoint=endpoint, pod="ep-1-y")
    assert (follower.from_zero, follower.started_at) == (False, at(503))
    # The gateway answers before the cycle saw the replica ready: the first byte completes the timeline, and
    # the stages the cycle adds afterwards keep it.
    coldstarts.record_first_byte(endpoint.pk, at(560))
    coldstarts.record(endpoint, [start("ep-1-z", 500, scheduled=501, ready=558)], at(565))
    coldstarts.record_first_byte(endpoint.pk, at(600))  # a second gateway's first answer: not this wake's
    row.refresh_from_db()
    instants = coldstarts.instants_of(row.stages)
    assert row.complete and (instants["ready"], instants["first_byte"]) == (at(558), at(560))


def test_a_first_byte_without_a_wake_records_nothing(endpoint):
    timeline_row(endpoint, "ep-1-a", 0, OFFSETS)
    coldstarts.record_first_byte(endpoint.pk, at(100))
    assert "first_byte" not in ColdStart.objects.get(endpoint=endpoint).stages


def test_a_burst_grant_starts_the_timeline_of_one_replica_only(endpoint):
    timeline_row(endpoint, "ep-1-a", 0, OFFSETS)  # its first replica was ready at 72 s
    ScalingEvent.objects.create(endpoint=endpoint, at=at(300), replicas=1, desired_replicas=2, replica_ceiling=2,
                                decision=ScalingDecision.BURST_GRANTED)
    coldstarts.record(endpoint, [start("ep-1-b", 306, scheduled=307), start("ep-1-c", 309, scheduled=310)], at(312))
    started = dict(ColdStart.objects.filter(endpoint=endpoint).values_list("pod", "started_at"))
    # The first pod after the grant takes it; the next one has no decision left but its own creation (a
    # scale-up within the ceiling the grant raised).
    assert (started["ep-1-b"], started["ep-1-c"]) == (at(300), at(309))


def test_the_cycle_keeps_an_endpoints_newest_200_timelines(endpoint):
    for i in range(coldstarts.KEEP):
        timeline_row(endpoint, f"old-{i}", -10_000 + i, OFFSETS)
    coldstarts.record(endpoint, [start("ep-1-new", 2, scheduled=4)], at(5))
    pods = set(ColdStart.objects.filter(endpoint=endpoint).values_list("pod", flat=True))
    assert len(pods) == coldstarts.KEEP and "ep-1-new" in pods and "old-0" not in pods and "old-1" in pods


# -- the API ---------------------------------------------------------------------------------------------------


def test_the_api_answers_the_newest_timelines_and_each_stages_p50_and_p95(api, endpoint, api_client_for, outsider):
    for i in range(20):  # model loads of 21..40 s, the newest last
        timeline_row(endpoint, f"ep-1-{i}", i * 1000, {**OFFSETS, "model_loaded": 31 + 21 + i, "ready": 31 + 22 + i})
    timeline_row(endpoint, "ep-1-z", 30_000, OFFSETS, from_zero=True, first_byte=74)
    body = api.get(f"/api/v1/endpoints/{endpoint.pk}/cold-starts/?limit=2").json()
    assert (body["kept"], body["complete"]) == (21, 21)
    newest, second = body["timelines"]
    assert (newest["pod"], newest["from_zero"], second["pod"]) == ("ep-1-z", True, "ep-1-19")
    assert newest["durations"] == {"scheduled": 4.0, "image_pulled": 26.0, "container_started": 1.0,
                                   "model_loaded": 40.0, "ready": 1.0, "first_byte": 2.0}
    assert (newest["elapsed_seconds"], newest["attributed_share"], newest["unattributed_seconds"]) == (74.0, 1.0, 0)
    assert list(newest["stages"]) == list(COLD_START_STAGES)
    figures = {f["stage"]: f for f in body["stages"]}
    # 21 model loads: 21..40 s and the woken one's 40 s; nearest rank: the 11th and the 20th.
    assert (figures["model_loaded"]["p50_seconds"], figures["model_loaded"]["p95_seconds"]) == (31.0, 40.0)
    assert figures["model_loaded"]["samples"] == 21 and figures["first_byte"]["samples"] == 1
    assert body["to_first_byte"] == {"stage": "to_first_byte", "p50_seconds": 74.0, "p95_seconds": 74.0, "samples": 1}
    assert len(api.get(f"/api/v1/endpoints/{endpoint.pk}/cold-starts/").json()["timelines"]) == 20  # the default
    for bad in ("0", "201", "ten", "-1"):
        refused = api.get(f"/api/v1/endpoints/{endpoint.pk}/cold-starts/?limit={bad}")
        assert refused.status_code == 400 and "limit" in refused.json()["errors"], bad
    assert api_client_for(outsider).get(f"/api/v1/endpoints/{endpoint.pk}/cold-starts/").status_code == 404


# -- the pages -------------------------------------------------------------------------------------------------


def test_the_endpoint_page_draws_the_last_timelines_as_stacked_bars_with_each_stages_figures(client, member,
                                                                                           endpoint):
    client.force_login(member)
    assert "No cold start recorded yet" in client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    timeline_row(endpoint, "ep-1-a", 0, OFFSETS)
    timeline_row(endpoint, "ep-1-b", 1000, {"container_started": 31, "model_loaded": 71}, complete=False)
    page = client.get(f"/endpoints/{endpoint.pk}/").content.decode()
    card = page[page.index('id="cold-starts"'):page.index("</section>", page.index('id="cold-starts"'))]
    rows = re.findall(r'<g class="cold-start-row" data-complete="(\w+)">(.*?)</g>', card, re.S)
    assert [complete for complete, _ in rows] == ["false", "true"]  # newest first
    stages = [re.findall(r'<rect class="cs (\w+)"', body) for _, body in rows]
    assert stages == [["unattributed", "model_loaded"],
                      ["scheduled", "image_pulled", "container_started", "model_loaded", "ready"]]
    widths = [float(w) for w in re.findall(r'width="([\d.]+)" height="16"', rows[1][1])]
    assert widths[3] == pytest.approx(widths[1] * 40 / 26, rel=0.02)  # one time scale: 40 s of load, 26 of pull
    assert "Model loaded: 40.0 s" in card
    table = card[card.index('id="cold-start-stages"'):]
    assert re.search(r"Model loaded</td><td class=\"num\">40\.0 s</td><td class=\"num\">40\.0 s</td>"
                     r"<td class=\"num\">2</td>", table)


def test_the_edit_forms_cold_start_hint_uses_the_endpoints_own_history_once_a_timeline_is_complete(
        client, member, endpoint):
    client.force_login(member)
    timeline_row(endpoint, "ep-1-a", 0, {"scheduled": 4}, complete=False)
    for path in (f"/endpoints/{endpoint.pk}/edit/", f"/endpoints/{endpoint.pk}/"):
        page = client.get(path).content.decode()
        assert 'id="cold-start-hint"' not in page and f"up to {endpoint.startup_timeout_seconds} s" in page
    timeline_row(endpoint, "ep-1-b", 1000, OFFSETS)
    timeline_row(endpoint, "ep-1-c", 2000, {**OFFSETS, "ready": 150})
    timeline_row(endpoint, "ep-1-d", 3000, {**OFFSETS, "ready": 90})
    for path in (f"/endpoints/{endpoint.pk}/edit/", f"/endpoints/{endpoint.pk}/"):
        hint = re.search(r'<span id="cold-start-hint">(.*?)</span>', client.get(path).content.decode(), re.S)
        assert hint, path
        assert "a median of <strong>1 min 30 s</strong>" in hint.group(1)  # of 72, 90 and 150 s
        assert "p95 2 min 30 s, over 3 cold starts" in hint.group(1)
