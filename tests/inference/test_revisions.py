"""Revisions, canary rollouts and the rollback rule (docs/serving.md "Revisions, canary and rollback").

Numbering and rollouts through the service every page, the API and the CLI call; the rule as a pure
function over a table of cases; the beat task's evaluation over TrafficWindow rows written as the gateway
writes them (10 s rows per revision, latency histograms), with its event and the owner's notification;
auto-promotion; and two evaluators at once on PostgreSQL.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError

from billing.models import QuotaHold
from inference import canary, histogram, revisions, scaling, services
from inference.canary import BAD, GOOD, NONE, Figures, Rule, judge
from inference.constants import RevisionState
from inference.models import EndpointRevision, InferenceEndpoint, TrafficWindow
from notifications import delivery
from notifications.models import Delivery, Event
from tests.inference.conftest import endpoint_payload
from tests.inference.test_scaling import ready, wants
from tests.threads import in_thread, paused_after, wait_until_lock_waiter

pytestmark = pytest.mark.django_db

#: A moment on a 10 s boundary, so the windows' edges are easy to read.
T0 = datetime(2026, 11, 26, 10, 0, 0, tzinfo=UTC)


def states(endpoint) -> list[tuple[int, str, int]]:
    return list(EndpointRevision.objects.filter(endpoint=endpoint).order_by("number").values_list(
        "number", "state", "weight"))


def reserved(endpoint) -> int:
    return QuotaHold.objects.held().get(ref=endpoint.ref).units


def fresh(endpoint) -> InferenceEndpoint:
    return InferenceEndpoint.objects.select_related("team", "flavor", "created_by").get(pk=endpoint.pk)


@pytest.fixture
def endpoint(member, team, ep_quota, published, fake_backend):
    return services.create_endpoint(member, team, endpoint_payload(min_replicas=1, max_replicas=1))


# -- numbering ------------------------------------------------------------------------------------------


def test_creation_makes_revision_one_and_only_serving_changes_make_the_next(endpoint, member):
    assert states(endpoint) == [(1, "stable", 100)]
    assert EndpointRevision.objects.get(endpoint=endpoint).spec == {
        "image": endpoint.image, "command": [], "args": [], "env": {}}
    services.update_endpoint(member, endpoint, {"max_replicas": 2, "scale_down_delay_seconds": 60})
    services.update_endpoint(member, endpoint, {"image": endpoint.image})  # the same image: no change
    assert states(endpoint) == [(1, "stable", 100)]

    services.update_endpoint(member, endpoint, {"image": "registry.example.com/serving/vllm:0.7"})
    assert states(endpoint) == [(1, "stable", 0), (2, "rolling", 100)]
    # Another replace before the first rolled out supersedes it: the Deployment rolls to the newest.
    services.update_endpoint(member, endpoint, {"args": ["--max-model-len", "4096"]})
    assert states(endpoint) == [(1, "stable", 0), (2, "retired", 0), (3, "rolling", 100)]
    assert fresh(endpoint).args == ["--max-model-len", "4096"]
    assert revisions.live_targets(endpoint) == [(3, 100, endpoint.object_name)]

    # The Deployment is seen rolled out to revision 3: it is stable, the earlier stable one retired.
    revisions.follow(fresh(endpoint), 3, True, None, T0)
    assert states(endpoint) == [(1, "retired", 0), (2, "retired", 0), (3, "stable", 100)]
    # A rollout observed incomplete, or of another revision, moves nothing.
    services.update_endpoint(member, endpoint, {"env": {"A": "1"}})
    revisions.follow(fresh(endpoint), 4, False, None, T0)
    revisions.follow(fresh(endpoint), 3, True, None, T0)
    assert states(endpoint)[-2:] == [(3, "stable", 0), (4, "rolling", 100)]


def test_a_canary_keeps_the_endpoints_spec_and_takes_its_weight_once_admitted(endpoint, member):
    services.update_endpoint(member, endpoint, {"image": "serve:2", "rollout": "canary", "weight": 20,
                                                "auto_promote_windows": 6})
    ep = fresh(endpoint)
    assert ep.image == endpoint.image  # the stable Deployment is untouched
    rev = EndpointRevision.objects.get(endpoint=endpoint, number=2)
    assert (rev.state, rev.weight, rev.auto_promote_windows, rev.replicas, rev.spec["image"]) == (
        "canary", 20, 6, 1, "serve:2")
    assert reserved(endpoint) == 2  # its replica's unit beside the stable one's
    assert revisions.live_targets(ep) == [(1, 80, ep.object_name), (2, 20, f"{ep.object_name}-canary")]
    spec = revisions.canary_spec(ep)
    assert (spec.revision, spec.image, spec.replicas) == (2, "serve:2", 1)

    # One candidate at a time: another rollout is a conflict, the API's 409.
    with pytest.raises(services.EndpointConflict, match="canary revision is live"):
        services.update_endpoint(member, endpoint, {"image": "serve:3"})
    assert states(endpoint) == [(1, "stable", 80), (2, "canary", 20)]


@pytest.mark.parametrize(("patch", "field", "words"), [
    ({"rollout": "canary", "weight": 20}, "rollout", "needs a new revision"),
    ({"image": "serve:2", "rollout": "canary"}, "weight", "needs a weight"),
    ({"image": "serve:2", "rollout": "canary", "weight": 51}, "weight", "between 1 and 50"),
    ({"image": "serve:2", "rollout": "canary", "weight": 0}, "weight", "between 1 and 50"),
    ({"image": "serve:2", "rollout": "canary", "weight": "x"}, "weight", "whole number"),
    ({"image": "serve:2", "rollout": "canary", "weight": 10, "auto_promote_windows": -1}, "auto_promote_windows",
     "between 0 and 100"),
    ({"image": "serve:2", "rollout": "blue-green"}, "rollout", "one of: replace, canary"),
    ({"image": "serve:2", "weight": 10}, "weight", "Only a canary"),
    ({"command": "python serve.py"}, "command", "list of strings"),
])
def test_bad_rollouts_are_refused_with_the_field_and_write_nothing(endpoint, member, patch, field, words):
    with pytest.raises(ValidationError) as caught:
        services.update_endpoint(member, endpoint, patch)
    assert words in " ".join(caught.value.message_dict[field])
    assert states(endpoint) == [(1, "stable", 100)]
    assert fresh(endpoint).image == endpoint.image


# -- quota ----------------------------------------------------------------------------------------------


def test_a_canary_the_quota_refuses_waits_with_its_words_and_runs_once_units_are_free(
        member, team, ep_quota, published, fake_backend):
    ep = services.create_endpoint(member, team, endpoint_payload(min_replicas=4, max_replicas=4))
    assert reserved(ep) == 4  # the team's whole A100 quota
    services.update_endpoint(member, ep, {"image": "serve:2", "rollout": "canary", "weight": 25})
    rev = EndpointRevision.objects.get(endpoint=ep, number=2)
    assert rev.replicas == 0 and rev.reason.startswith("waiting for quota")
    assert "a100-80gb" in rev.reason
    assert revisions.live_targets(ep) == [(1, 100, ep.object_name)]  # no traffic to what does not run
    assert revisions.canary_spec(fresh(ep)) is None

    # Its minimum lowered: the next observation admits the candidate from the units given back.
    services.update_endpoint(member, ep, {"min_replicas": 2, "max_replicas": 2})
    assert reserved(ep) == 2
    revisions.follow(fresh(ep), 1, True, None, T0)
    rev.refresh_from_db()
    assert (rev.replicas, rev.reason) == (1, "")  # 25 % of 0 ready replicas: at least one
    assert reserved(ep) == 3


# -- a cycle's copy of the row is older than the row ---------------------------------------------------
# The reconcile cycle reads the endpoint before it asks the cluster: a PATCH or a delete may land before
# revisions.follow moves units, which it decides on the row as it is under the team's lock.


def test_a_cycle_with_a_stale_row_admits_a_candidate_beside_the_ceiling_now(member, team, ep_quota, published,
                                                                           fake_backend):
    ep = ready(services.create_endpoint(member, team, endpoint_payload(min_replicas=1, max_replicas=2)))
    scaling.follow(ep, wants(1, 2, limited=True), T0)  # burst: ceiling 2
    other = services.create_endpoint(member, team, endpoint_payload(name="other", min_replicas=2, max_replicas=2))
    services.update_endpoint(member, fresh(ep), {"image": "serve:2", "rollout": "canary", "weight": 25})
    assert EndpointRevision.objects.get(endpoint=ep, number=2).replicas == 0  # 4 of 4 A100s held: it waits
    stale = ready(ep)  # what the cycle read: ceiling 2
    services.delete_endpoint(member, other)
    services.update_endpoint(member, fresh(ep), {"max_replicas": 1})  # ceiling 1
    revisions.follow(stale, 1, True, None, T0)
    assert EndpointRevision.objects.get(endpoint=ep, number=2).replicas == 1
    assert reserved(ep) == 2  # the ceiling now (1) and the candidate's replica, not the ceiling read before


def test_a_cycle_with_a_stale_row_releases_a_promoted_candidate_down_to_the_ceiling_now(
        member, team, ep_quota, published, fake_backend):
    ep = ready(services.create_endpoint(member, team, endpoint_payload(min_replicas=1, max_replicas=2)))
    scaling.follow(ep, wants(1, 2, limited=True), T0)
    services.update_endpoint(member, fresh(ep), {"image": "serve:2", "rollout": "canary", "weight": 25})
    services.promote_endpoint(member, fresh(ep))
    assert reserved(ep) == 3  # ceiling 2, and the candidate's replica until the rollout is done
    stale = ready(ep)
    services.update_endpoint(member, fresh(ep), {"max_replicas": 1})
    assert reserved(ep) == 2
    revisions.follow(stale, 2, True, None, T0)  # rolled out to revision 2: its replica's units go back
    assert reserved(ep) == 1


def test_a_cycle_with_a_stale_row_moves_nothing_of_an_endpoint_deleted_meanwhile(member, team, ep_quota, published,
                                                                                 fake_backend):
    ep = ready(services.create_endpoint(member, team, endpoint_payload(min_replicas=4, max_replicas=4)))
    services.update_endpoint(member, ep, {"image": "serve:2", "rollout": "canary", "weight": 25})
    assert EndpointRevision.objects.get(endpoint=ep, number=2).replicas == 0  # waiting for quota
    stale = fresh(ep)  # what the cycle read: ready, its candidate waiting
    services.delete_endpoint(member, fresh(ep))
    revisions.follow(stale, 1, True, None, T0)  # no LookupError: the cluster's pass goes on
    assert EndpointRevision.objects.get(endpoint=ep, number=2).replicas == 0
    assert not QuotaHold.objects.held().filter(ref=ep.ref).exists()


def test_a_delete_ends_the_live_candidate_with_its_endpoint(endpoint, candidate, member):
    assert reserved(endpoint) == 2
    services.delete_endpoint(member, fresh(endpoint))
    assert states(endpoint) == [(1, "stable", 100), (2, "rolled_back", 0)]
    rev = EndpointRevision.objects.get(pk=candidate.pk)
    assert (rev.replicas, rev.verdict["by"], rev.verdict["ended"]) == (0, member.username, "deleted")
    assert rev.ended_at is not None
    assert not QuotaHold.objects.held().filter(ref=endpoint.ref).exists()
    assert revisions.held_replicas(endpoint) == 0 and revisions.canary_spec(fresh(endpoint)) is None
    assert canary.evaluate_all(T0) == {} and not Event.objects.exists()  # no rollback event: nothing judged


def test_a_delete_mid_promotion_and_a_failure_end_the_candidates_replicas_too(member, team, ep_quota, published,
                                                                            fake_backend):
    from workloads import lifecycle
    from workloads.models import ReasonCode

    promoted = services.create_endpoint(member, team, endpoint_payload(name="promoted"))
    services.update_endpoint(member, promoted, {"image": "serve:2", "rollout": "canary", "weight": 20})
    services.promote_endpoint(member, fresh(promoted))
    services.delete_endpoint(member, fresh(promoted))
    assert list(EndpointRevision.objects.filter(endpoint=promoted).order_by("number").values_list(
        "state", "replicas")) == [("retired", 0), ("rolling", 0)]  # its replica's units went with the hold

    failed = services.create_endpoint(member, team, endpoint_payload(name="failed"))
    services.update_endpoint(member, failed, {"image": "serve:2", "rollout": "canary", "weight": 20})
    assert lifecycle.fail(fresh(failed), "CrashLoopBackOff", ReasonCode.CLUSTER)
    assert states(failed) == [(1, "stable", 100), (2, "rolled_back", 0)]
    assert EndpointRevision.objects.get(endpoint=failed, number=2).verdict["ended"] == "failed"


def test_a_replace_over_a_promoted_rollout_gives_the_candidates_units_back_at_once(
        endpoint, member, published, django_capture_on_commit_callbacks):
    """Promoted, the candidate keeps its replica until its rollout is done; a replace before then (say back to
    the old image: a rollback is a 409 after a promote) supersedes that rollout, which so never ends: its
    units and objects go back with the replace (revisions.start), not never."""
    old_image = endpoint.image
    services.update_endpoint(member, endpoint, {"image": "serve:2", "rollout": "canary", "weight": 20})
    services.promote_endpoint(member, endpoint)
    assert reserved(endpoint) == 2  # the candidate keeps its units until the rollout is done
    with django_capture_on_commit_callbacks(execute=True):
        services.update_endpoint(member, fresh(endpoint), {"image": old_image})
    assert states(endpoint) == [(1, "retired", 0), (2, "retired", 0), (3, "rolling", 100)]
    assert EndpointRevision.objects.get(endpoint=endpoint, number=2).replicas == 0
    assert reserved(endpoint) == 1  # min = max = 1, no candidate
    assert revisions.canary_spec(fresh(endpoint)) is None
    assert published.count(("inference.cleanup.delete_candidate", (endpoint.pk,))) == 1

    revisions.follow(fresh(endpoint), 3, True, None, T0)  # revision 3 rolled out
    assert states(endpoint)[-1] == (3, "stable", 100)
    assert reserved(endpoint) == 1


def test_a_canary_waits_until_a_rollout_is_done_then_is_compared_with_what_served(endpoint, member):
    """While a revision rolls out, the endpoint's Service serves it and the stable one answers nothing: a canary
    compared with the stable one would never get a verdict, nor be rolled back, so it is refused (409)."""
    services.update_endpoint(member, endpoint, {"image": "serve:2"})  # replace: revision 2 rolling
    with pytest.raises(services.EndpointConflict, match="Revision 2 is still rolling out"):
        services.update_endpoint(member, fresh(endpoint), {"image": "serve:3", "rollout": "canary", "weight": 20})
    assert states(endpoint) == [(1, "stable", 0), (2, "rolling", 100)]
    assert reserved(endpoint) == 1

    # Rolled out, revision 2 is the stable one: the canary starts, and is judged against it.
    revisions.follow(fresh(endpoint), 2, True, None, T0)
    services.update_endpoint(member, fresh(endpoint), {"image": "serve:3", "rollout": "canary", "weight": 20})
    ep = fresh(endpoint)
    assert revisions.live_targets(ep) == [(2, 80, ep.object_name), (3, 20, f"{ep.object_name}-canary")]
    write_rows(ep, 2, T0 - timedelta(seconds=60), 60, requests=40, errors=0, latency_ms=50)
    write_rows(ep, 3, T0 - timedelta(seconds=60), 60, requests=10, errors=5, latency_ms=50)
    assert canary.evaluate_all(T0 + timedelta(seconds=5)) == {ep.ref: "rolled_back"}


def test_a_canary_waits_for_a_promoted_candidates_rollout_too(endpoint, member):
    services.update_endpoint(member, endpoint, {"image": "serve:2", "rollout": "canary", "weight": 20})
    services.promote_endpoint(member, endpoint)
    with pytest.raises(services.EndpointConflict, match="Revision 2 is still rolling out"):
        services.update_endpoint(member, fresh(endpoint), {"image": "serve:3", "rollout": "canary", "weight": 20})
    assert states(endpoint) == [(1, "retired", 0), (2, "rolling", 100)]


# -- the rule, pure -------------------------------------------------------------------------------------

RULE = Rule(error_delta=0.02, latency_factor=1.5, min_requests=20, bad_windows=2)


@pytest.mark.parametrize(("cand", "stable", "verdict"), [
    (Figures(100, 0, 80), Figures(400, 0, 80), GOOD),
    (Figures(100, 2, 80), Figures(400, 0, 80), GOOD),           # 2.0 points: not more than the delta
    (Figures(100, 3, 80), Figures(400, 0, 80), BAD),            # 3 points above
    (Figures(100, 7, 80), Figures(400, 20, 80), BAD),           # 7 % against 5 %: 2 points... and a bit
    (Figures(100, 6, 80), Figures(400, 20, 80), GOOD),          # 6 % against 5 %
    (Figures(50, 25, 80), Figures(200, 0, 80), BAD),            # half its answers 5xx
    (Figures(100, 0, 121), Figures(400, 0, 80), BAD),           # p95 over 1.5×
    (Figures(100, 0, 120), Figures(400, 0, 80), GOOD),          # exactly 1.5×
    (Figures(19, 19, 5000), Figures(400, 0, 80), NONE),         # too few candidate requests for a verdict
    (Figures(100, 50, 80), Figures(19, 0, 80), NONE),           # too few stable requests
    (Figures(0, 0, None), Figures(0, 0, None), NONE),           # no traffic at all
    (Figures(20, 0, None), Figures(20, 0, 80), GOOD),           # no latency known: the error rate alone
])
def test_the_rule_judges_a_window(cand, stable, verdict):
    assert judge(cand, stable, RULE).verdict == verdict


def test_the_rule_follows_its_settings():
    strict = Rule(error_delta=0.005, latency_factor=1.1, min_requests=5)
    assert judge(Figures(10, 1, 80), Figures(100, 0, 80), strict).verdict == BAD
    assert judge(Figures(10, 0, 90), Figures(100, 0, 80), strict).verdict == BAD
    assert judge(Figures(4, 4, 80), Figures(100, 0, 80), strict).verdict == NONE


def test_the_windows_end_on_a_settled_10_second_boundary():
    # The newest ends on the last 10 s boundary at least SETTLE_SECONDS (3 s) old.
    assert canary.window_ends(T0 + timedelta(seconds=12), 3) == [
        T0, T0 - timedelta(seconds=30), T0 - timedelta(seconds=60)]
    assert canary.window_ends(T0 + timedelta(seconds=13), 1) == [T0 + timedelta(seconds=10)]


# -- the task over the gateway's rows -------------------------------------------------------------------


def write_rows(endpoint, revision: int, start: datetime, seconds: int, requests: int, errors: int,
               latency_ms: float) -> None:
    """What the gateways write: one row per revision and 10 s, its counts and latency histogram."""
    for offset in range(0, seconds, 10):
        counts = histogram.empty()
        for i in range(requests):
            histogram.add(counts, latency_ms * (1 + (i % 5) / 10))
        TrafficWindow.objects.create(endpoint=endpoint, team=endpoint.team, revision=revision,
                                     start=start + timedelta(seconds=offset), step=10, requests=requests,
                                     status_2xx=requests - errors, status_5xx=errors, latency=counts)


@pytest.fixture
def candidate(endpoint, member):
    services.update_endpoint(member, endpoint, {"image": "serve:2", "rollout": "canary", "weight": 20})
    return EndpointRevision.objects.get(endpoint=endpoint, number=2)


def test_half_of_the_candidates_answers_5xx_rolls_it_back_after_two_windows(endpoint, candidate, member, published,
                                                                           django_capture_on_commit_callbacks):
    # A minute and a half of good traffic, then the candidate answers half its requests with 5xx.
    start = T0 - timedelta(seconds=90)
    write_rows(endpoint, 1, start, 150, requests=40, errors=0, latency_ms=60)
    write_rows(endpoint, 2, start, 90, requests=10, errors=0, latency_ms=60)
    write_rows(endpoint, 2, T0, 60, requests=10, errors=5, latency_ms=60)

    # One bad window (T0 .. T0+30) is not enough.
    assert canary.evaluate_all(T0 + timedelta(seconds=35)) == {endpoint.ref: "kept"}
    candidate.refresh_from_db()
    assert (candidate.state, candidate.bad_windows, candidate.good_windows) == ("canary", 1, 0)
    assert not Event.objects.exists()

    # The second one is: rolled back within the evaluation after its end settled.
    with django_capture_on_commit_callbacks(execute=True):
        assert canary.evaluate_all(T0 + timedelta(seconds=65)) == {endpoint.ref: "rolled_back"}
    candidate.refresh_from_db()
    assert (candidate.state, candidate.weight, candidate.replicas) == ("rolled_back", 0, 0)
    assert candidate.ended_at == T0 + timedelta(seconds=65)
    verdict = candidate.verdict
    assert verdict["by"] == "rule" and verdict["stable_revision"] == 1
    newest, older = verdict["windows"]
    assert (newest["start"], newest["end"]) == ((T0 + timedelta(seconds=30)).isoformat(),
                                                (T0 + timedelta(seconds=60)).isoformat())
    assert newest["candidate"]["error_rate"] == 0.5 and newest["stable"]["error_rate"] == 0
    assert newest["candidate"]["requests"] == 30 and newest["stable"]["requests"] == 120
    assert newest["candidate"]["p95_ms"] == pytest.approx(newest["stable"]["p95_ms"])
    assert older["verdict"] == "bad"

    # The stable revision keeps serving all of it; the candidate's units and objects go.
    assert revisions.live_targets(fresh(endpoint)) == [(1, 100, endpoint.object_name)]
    assert reserved(endpoint) == 1
    assert ("inference.cleanup.delete_candidate", (endpoint.pk,)) in published

    # The event, told to the owner though they subscribed to nothing.
    event = Event.objects.get()
    assert event.event_kind == "endpoint_canary_rolled_back"
    assert "rolled its canary back" in event.title and "5xx rate 50.0%" in event.text
    delivery.fan_out(event.key)
    assert list(Delivery.objects.values_list("user__username", flat=True)) == [member.username]

    # Evaluated again: nothing more happens (no candidate, no second event).
    assert canary.evaluate_all(T0 + timedelta(seconds=75)) == {}
    assert Event.objects.count() == 1


def test_a_slow_candidate_is_rolled_back_on_its_p95(endpoint, candidate):
    write_rows(endpoint, 1, T0 - timedelta(seconds=60), 60, requests=40, errors=0, latency_ms=50)
    write_rows(endpoint, 2, T0 - timedelta(seconds=60), 60, requests=10, errors=0, latency_ms=200)
    assert canary.evaluate_all(T0 + timedelta(seconds=5)) == {endpoint.ref: "rolled_back"}
    candidate.refresh_from_db()
    assert "p95" in Event.objects.get().text
    assert candidate.verdict["windows"][0]["candidate"]["p95_ms"] > 1.5 * candidate.verdict["windows"][0]["stable"]["p95_ms"]


def test_low_traffic_never_decides(endpoint, candidate):
    write_rows(endpoint, 1, T0 - timedelta(seconds=60), 60, requests=40, errors=0, latency_ms=50)
    write_rows(endpoint, 2, T0 - timedelta(seconds=60), 60, requests=1, errors=1, latency_ms=50)  # 3 a window
    assert canary.evaluate_all(T0 + timedelta(seconds=5)) == {endpoint.ref: "kept"}
    candidate.refresh_from_db()
    assert candidate.state == "canary"


def test_a_good_candidate_is_promoted_after_its_windows_and_becomes_stable_once_rolled_out(
        endpoint, member, published, fake_backend, django_capture_on_commit_callbacks):
    services.update_endpoint(member, endpoint, {"image": "serve:2", "rollout": "canary", "weight": 20,
                                                "auto_promote_windows": 3})
    write_rows(endpoint, 1, T0 - timedelta(seconds=90), 90, requests=40, errors=1, latency_ms=50)
    write_rows(endpoint, 2, T0 - timedelta(seconds=90), 60, requests=10, errors=0, latency_ms=50)
    assert canary.evaluate_all(T0 + timedelta(seconds=5)) == {endpoint.ref: "kept"}  # two good windows so far
    assert EndpointRevision.objects.get(endpoint=endpoint, number=2).good_windows == 0  # the newest had no traffic
    write_rows(endpoint, 2, T0 - timedelta(seconds=30), 30, requests=10, errors=0, latency_ms=50)
    assert canary.evaluate_all(T0 + timedelta(seconds=5)) == {endpoint.ref: "promoted"}

    assert states(endpoint) == [(1, "retired", 0), (2, "rolling", 100)]
    ep = fresh(endpoint)
    assert ep.image == "serve:2"  # the stable Deployment takes the candidate's spec and rolls
    assert reserved(ep) == 2  # the candidate keeps its units until the rollout is done
    assert EndpointRevision.objects.get(endpoint=endpoint, number=2).verdict["promoted_after_windows"] == 3

    with django_capture_on_commit_callbacks(execute=True):
        revisions.follow(ep, 2, True, 1, T0 + timedelta(seconds=30))
    assert states(endpoint) == [(1, "retired", 0), (2, "stable", 100)]
    assert reserved(ep) == 1
    assert revisions.live_targets(ep) == [(2, 100, ep.object_name)]
    assert published.count(("inference.cleanup.delete_candidate", (ep.pk,))) == 1


def test_promote_and_rollback_by_hand(endpoint, candidate, member):
    ep = services.rollback_endpoint(member, endpoint)
    candidate.refresh_from_db()
    assert candidate.state == "rolled_back" and candidate.verdict["by"] == member.username
    assert "rolled back by mia" in Event.objects.get().text
    with pytest.raises(services.EndpointConflict, match="no canary"):
        services.rollback_endpoint(member, ep)
    with pytest.raises(services.EndpointConflict, match="no canary"):
        services.promote_endpoint(member, ep)
    services.update_endpoint(member, ep, {"env": {"MODEL": "b"}, "rollout": "canary", "weight": 10})
    services.promote_endpoint(member, ep)
    assert states(endpoint) == [(1, "retired", 0), (2, "rolled_back", 0), (3, "rolling", 100)]
    assert fresh(endpoint).env == {"MODEL": "b"}


def test_a_viewer_may_not_roll_out_promote_or_roll_back(endpoint, candidate, viewer):
    from django.core.exceptions import PermissionDenied

    for act in (lambda: services.promote_endpoint(viewer, endpoint),
                lambda: services.rollback_endpoint(viewer, endpoint),
                lambda: services.update_endpoint(viewer, endpoint, {"image": "x:1"})):
        with pytest.raises(PermissionDenied):
            act()
    candidate.refresh_from_db()
    assert candidate.state == "canary"


# -- two evaluators at once -----------------------------------------------------------------------------


@pytest.mark.postgres  # PostgreSQL's statements and locks
@pytest.mark.django_db(transaction=True)
def test_two_evaluators_at_once_roll_back_once(member, team, ep_quota, published, fake_backend):
    endpoint = services.create_endpoint(member, team, endpoint_payload(min_replicas=1, max_replicas=1))
    services.update_endpoint(member, endpoint, {"image": "serve:2", "rollout": "canary", "weight": 20})
    write_rows(endpoint, 1, T0 - timedelta(seconds=60), 60, requests=40, errors=0, latency_ms=50)
    write_rows(endpoint, 2, T0 - timedelta(seconds=60), 60, requests=10, errors=5, latency_ms=50)
    now = T0 + timedelta(seconds=5)
    rev = EndpointRevision.objects.get(endpoint=endpoint, number=2)

    inside, go = threading.Event(), threading.Event()
    results: list[str] = []
    errors: list[Exception] = []

    def first():
        # Held right after its conditional move, with the team's lock and the revision's row held.
        with paused_after('UPDATE "inference_endpointrevision" SET "state"', inside, go):
            results.append(canary.evaluate(rev, now, RULE))

    one = in_thread(first, errors)
    assert inside.wait(10)
    try:
        other = in_thread(lambda: results.append(canary.evaluate(rev, now, RULE)), errors)
        assert '"portal_team"' in wait_until_lock_waiter(other).query  # it waits for the team's lock
    finally:
        go.set()
    one.join(30)
    other.join(30)
    assert errors == []
    assert sorted(results) == ["kept", "rolled_back"]
    assert Event.objects.count() == 1
    assert reserved(endpoint) == 1
    assert EndpointRevision.objects.get(pk=rev.pk).state == RevisionState.ROLLED_BACK


@pytest.mark.parametrize("count", [1, 6])
def test_the_task_reads_every_candidate_with_three_queries(member, team, flavors, published, fake_backend, count,
                                                            django_assert_num_queries):
    from decimal import Decimal

    from quotas.demo import seed_team_quotas

    seed_team_quotas(team, {"a100-80gb": 16}, Decimal("1000000"))
    for i in range(count):
        ep = services.create_endpoint(member, team, endpoint_payload(name=f"e{i}", min_replicas=1, max_replicas=1))
        services.update_endpoint(member, ep, {"image": "serve:2", "rollout": "canary", "weight": 20})
        write_rows(ep, 1, T0 - timedelta(seconds=60), 60, requests=40, errors=0, latency_ms=50)
        write_rows(ep, 2, T0 - timedelta(seconds=60), 60, requests=10, errors=0, latency_ms=50)
    canary.evaluate_all(T0 + timedelta(seconds=5))  # the counters move once (two good windows)
    with django_assert_num_queries(3):  # the candidates, their stable revisions, their rows
        assert set(canary.evaluate_all(T0 + timedelta(seconds=5)).values()) == {"kept"}


# -- promote and delete at once -------------------------------------------------------------------------


@pytest.mark.postgres  # PostgreSQL's statements and locks
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("first", ["delete", "promote"])
def test_a_promote_and_a_delete_at_once_leave_a_deleted_endpoint_with_nothing_held(member, team, ep_quota, published,
                                                                                  fake_backend, first):
    """Both requests read the endpoint running with its candidate; the team's lock orders them. The delete first:
    the promote is a 409 (it gave the deleted endpoint the candidate's spec, a rolling revision holding its replica,
    and an apply). The promote first: the delete ends its rolling candidate's replicas with the endpoint."""
    endpoint = services.create_endpoint(member, team, endpoint_payload(min_replicas=1, max_replicas=1))
    services.update_endpoint(member, endpoint, {"image": "serve:2", "rollout": "canary", "weight": 20})
    copy = fresh(endpoint)  # what both requests read
    old_image = copy.image
    pause = {"delete": 'UPDATE "workloads_workload" SET "state"',
             "promote": 'UPDATE "inference_endpointrevision" SET "state"'}[first]
    acts = {"delete": lambda: services.delete_endpoint(member, copy),
            "promote": lambda: services.promote_endpoint(member, copy)}
    second = "promote" if first == "delete" else "delete"
    applies = published.count(("workloads.tasks.apply_workload", ("ep", endpoint.pk)))

    inside, go = threading.Event(), threading.Event()
    errors: list[Exception] = []

    def held():
        with paused_after(pause, inside, go):
            acts[first]()

    one = in_thread(held, errors)
    assert inside.wait(10)
    try:
        other = in_thread(acts[second], errors)
        assert '"portal_team"' in wait_until_lock_waiter(other).query  # it waits for the team's lock
    finally:
        go.set()
    one.join(30)
    other.join(30)

    ep = fresh(endpoint)
    assert ep.state == "deleting"
    assert not QuotaHold.objects.held().filter(ref=ep.ref).exists()
    assert revisions.held_replicas(ep) == 0
    if first == "delete":
        assert [type(e) for e in errors] == [services.EndpointConflict]
        assert "deleting" in str(errors[0])
        assert ep.image == old_image  # no new spec for a deleted endpoint
        assert states(ep) == [(1, "stable", 100), (2, "rolled_back", 0)]
        assert published.count(("workloads.tasks.apply_workload", ("ep", ep.pk))) == applies  # nor an apply
    else:
        assert errors == []
        assert ep.image == "serve:2"
        assert states(ep) == [(1, "retired", 0), (2, "rolling", 100)]


# -- two rollouts at once -------------------------------------------------------------------------------


@pytest.mark.postgres  # two connections, each request's transaction its own
@pytest.mark.django_db(transaction=True)
def test_two_rollouts_at_once_each_answer_with_their_own_revision(member, team, ep_quota, published, fake_backend):
    """The first rollout has committed revision 2; the second makes revision 3 before the first answers. The
    first answered with the newest revision above the one it saw before (3: the other's)."""
    from django.db import connection

    endpoint = services.create_endpoint(member, team, endpoint_payload(min_replicas=1, max_replicas=1))
    copy = fresh(endpoint)
    inside, go = threading.Event(), threading.Event()
    answers: dict[str, EndpointRevision] = {}
    errors: list[Exception] = []
    made = []

    def wrapper(execute, sql, params, many, context):
        # Paused before the first statement the first request runs once its transaction committed.
        if made and not connection.in_atomic_block and not inside.is_set():
            inside.set()
            go.wait(10)
        result = execute(sql, params, many, context)
        if sql.startswith('INSERT INTO "inference_endpointrevision"'):
            made.append(sql)
        return result

    def first():
        with connection.execute_wrapper(wrapper):
            answers["first"] = services.rollout_endpoint(member, copy, {"image": "serve:2"})

    one = in_thread(first, errors)
    while not inside.wait(0.01) and one.is_alive():
        pass
    try:
        answers["second"] = services.rollout_endpoint(member, copy, {"image": "serve:3"})
    finally:
        go.set()
    one.join(30)
    assert errors == []
    assert (answers["first"].number, answers["first"].spec["image"]) == (2, "serve:2")
    assert (answers["second"].number, answers["second"].spec["image"]) == (3, "serve:3")
    assert states(endpoint) == [(1, "stable", 0), (2, "retired", 0), (3, "rolling", 100)]
