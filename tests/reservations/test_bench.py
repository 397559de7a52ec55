"""bench/reservations.py (issue 49) on its quick trace: what the replayed windows do, read from the replays.

Pure (no database): the bench replays bench/sharing.py's trace with random bookings and their holders' runs
through the production's rules, and these tests check what the windows did there — not only that it printed.
"""

from __future__ import annotations

import importlib.util
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from reservations import occupancy

ROOT = Path(__file__).resolve().parent.parent.parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def quick():
    """The bench's own quick run (the trace's first 48 hours), one round: its module and its :class:`Bench`."""
    bench = _load("reservations")
    return bench, bench.simulate(*bench.parse(["--quick", "--rounds", "1"]))[0]


def test_the_bookings_hold_the_booked_share_within_the_reservable_one(quick):
    _module, bench = quick
    capacity, hours = bench.setup.capacity, bench.hours
    reservable = occupancy.reservable(capacity, Decimal("0.5"))
    held = [window.held() for window in bench.windows]
    assert sum(window.unit_s for window in bench.windows) >= 0.30 * capacity * hours * 3600
    for window in bench.windows:
        assert window.start_s % 1800 == 0 and window.end_s <= hours * 3600
        assert 1 <= (window.end_s - window.start_s) / 3600 <= 8 and 2 <= window.units <= reservable
        mine = held[window.index]
        assert occupancy.peak(held, mine.start, mine.end)[0] <= reservable
    # Every window brings its holder's run; every third a second one.
    refs = {run.ref for run, _window in bench.holders}
    assert {f"window:{window.index}:0" for window in bench.windows} <= refs
    assert len(refs) == len(bench.windows) + len(range(0, len(bench.windows), 3))


def test_windows_lend_their_idle_units_and_take_them_back_within_the_grace(quick):
    _module, bench = quick
    targeted, opened, unbooked, trace = bench.replays
    setup = bench.setup
    for reserved in (targeted, opened):
        # Lent work: placed on windows' idle units, and counted as the windows' use.
        assert reserved.loans > 0 and reserved.use["lent"] > 0
        # Taken back: windows preempted other work (notice, grace, back to its queue), which lost work.
        assert reserved.preempted["window"] > 0 and reserved.lost["window"] > 0
        # Work admitted into a window started within the grace and a cycle, every time its units were not free.
        assert reserved.claim_waits and max(reserved.claim_waits) <= setup.stop_s + setup.cycle_s
        assert not reserved.never
        # Some booked runs started in their window as it opened, or as they were submitted in it.
        assert min(reserved.delays()) == 0
        # The windows' use adds up to what was booked.
        assert sum(reserved.use.values()) == pytest.approx(reserved.booked_unit_s)
        # A booked run names its booking, so it goes into no other window of its team's.
        assert not reserved.elsewhere
    # Without bookings nothing is reserved, lent or taken back.
    for replay in (unbooked, trace):
        assert replay.loans == 0 and replay.preempted["window"] == 0 and not replay.inside
    for replay in bench.replays:
        assert not replay.result.broken, replay.result.broken[:3]
        assert replay.result.samples


def test_booked_runs_naming_a_targeted_booking_start_in_it_within_the_notice_and_a_cycle(quick):
    """Targeted bookings (docs/reservations.md "Open or targeted"): only the runs naming a booking go into its window
    — the team's other work never does — and each starts there within the notice and a cycle of when it wanted to
    (its submission, or its window's start when submitted before). Open bookings let the team's other work in: it
    used their units, and the runs naming them went in all the same."""
    _module, bench = quick
    targeted, opened = bench.replay("targeted"), bench.replay("open")
    setup = bench.setup
    assert all(run.for_reservation == window.reservation for run, window in targeted.holders)
    assert targeted.use["team work"] == 0 and targeted.use["booked runs"] > 0
    assert max(targeted.delays()) <= setup.stop_s + setup.cycle_s
    assert not targeted.outside
    assert opened.use["team work"] > 0 and opened.use["booked runs"] > 0
    # Unbooked, the same runs name nothing (there is nothing to name) and go by the quota.
    assert all(run.for_reservation is None for run, _window in bench.replay("unbooked").holders)


def test_the_trace_alone_is_bench_sharings_cohort_replay(quick):
    """The hooks the bench needs in bench/sharing.py's replay change nothing there: without windows and holders'
    runs, the bench's replay is bench/sharing.py's cohort replay, figure for figure."""
    _module, bench = quick
    trace = bench.replay("trace").result
    sharing = _load("sharing")
    alone = sharing.replay(bench.setup, bench.trace, cohort=True)
    assert (trace.utilization, trace.max_fair_error, trace.preemptions, trace.lost_unit_s, trace.mean_wait_s,
            trace.span_s, len(trace.samples)) == (alone.utilization, alone.max_fair_error, alone.preemptions,
                                                  alone.lost_unit_s, alone.mean_wait_s, alone.span_s,
                                                  len(alone.samples))
    # Its accounts of the trace's own runs are bench/sharing.py's figures then.
    assert bench.replay("trace").own_allocated == pytest.approx(alone.allocated)
    assert bench.replay("trace").own_fair == pytest.approx(alone.fair)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), hours=st.sampled_from([12, 24]), share=st.sampled_from([0.2, 0.3, 0.4]),
       lead=st.sampled_from([5, 15]))
def test_on_random_bookings_and_arrivals_the_invariants_hold_and_no_window_waits_for_others_work(
        quick, seed, hours, share, lead):
    """Issue 49's property, on the production's rules as the bench replays them: over random bookings (within the
    reservable share at every instant) and random arrivals of the holders' work, the replay's invariants hold at
    every cycle (never more running than the capacity; nothing booked over the share) with the bookings targeted
    and open alike (one of them: a window's work never waits while another team's work that is not stopping runs),
    and work admitted into a targeted window never waits longer than its notice takes — the grace and one cycle.
    In an open one it may also wait for its own team's quota work, never preempted for its own team's open window
    (docs/reservations.md "Open or targeted"), even past the window's end."""
    module, _bench = quick
    own, args = module.parse(["--quick", str(hours), "--seed", str(seed), "--reserved", str(share),
                              "--lead", str(lead)])
    trace = module.sharing.read_trace(args.trace, hours)
    setup = module.sharing.make_setup(args, trace)
    rng = module.random.Random(seed)
    try:
        windows = module.book(setup, hours, share, rng)
    except SystemExit:  # the bench's own refusal: these random bookings do not fit the reservable share
        reject()
    holders = module.holder_runs(windows, own.early * 60, rng)
    for targeted in (True, False):
        replay = module.Reserving(setup, trace, windows, holders, "reserved", targeted=targeted)
        with override_settings(SLIPWAY_RESERVATION_LEAD_MINUTES=lead):
            replay.run()
        assert not replay.result.broken, replay.result.broken[:3]
        if targeted:  # an open window's work may wait for its own team's quota work, even past the window's end
            assert all(wait <= setup.stop_s + setup.cycle_s for wait in replay.claim_waits), max(replay.claim_waits)
            assert not replay.never
        assert sum(replay.use.values()) == pytest.approx(replay.booked_unit_s)
