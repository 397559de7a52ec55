"""A booking's windows keep their wall-clock time across daylight-saving changes (issue 49's DST week)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from reservations import windows as calendar

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def test_a_weekly_booking_stays_at_nine_local_across_the_change_to_winter_time():
    # Berlin leaves summer time on Sunday 2026-10-25 (03:00 CEST → 02:00 CET): the Thursdays around it.
    rule = calendar.Recurrence(calendar.WEEKLY, (3,), count=3)
    found = calendar.windows(datetime(2026, 10, 15, 9), datetime(2026, 10, 15, 12), BERLIN, rule)
    assert [(w.start, w.end) for w in found] == [
        (datetime(2026, 10, 15, 7, tzinfo=UTC), datetime(2026, 10, 15, 10, tzinfo=UTC)),  # CEST, UTC+2
        (datetime(2026, 10, 22, 7, tzinfo=UTC), datetime(2026, 10, 22, 10, tzinfo=UTC)),
        (datetime(2026, 10, 29, 8, tzinfo=UTC), datetime(2026, 10, 29, 11, tzinfo=UTC)),  # CET, UTC+1
    ]
    assert all(calendar.local(w.start, BERLIN).hour == 9 and calendar.local(w.end, BERLIN).hour == 12 for w in found)


def test_the_week_of_the_change_to_summer_time_keeps_every_day_at_nine():
    # 2027-03-28: 02:00 CET → 03:00 CEST. A daily booking over that week.
    found = calendar.windows(datetime(2027, 3, 25, 9), datetime(2027, 3, 25, 12), BERLIN,
                             calendar.Recurrence(calendar.DAILY, until=date(2027, 3, 31)))
    assert len(found) == 7
    assert [w.start.hour for w in found] == [8, 8, 8, 7, 7, 7, 7]  # UTC: CET until the Saturday, CEST from Sunday
    assert {calendar.local(w.start, BERLIN).hour for w in found} == {9}
    assert {w.end - w.start for w in found} == {timedelta(hours=3)}


def test_a_night_window_across_the_change_is_its_wall_clock_length_less_the_hour_skipped():
    found = calendar.windows(datetime(2027, 3, 27, 22), datetime(2027, 3, 28, 6), BERLIN)
    assert found[0].end - found[0].start == timedelta(hours=7)


def test_a_start_in_the_skipped_hour_is_read_with_the_offset_before_the_change():
    found = calendar.windows(datetime(2027, 3, 28, 2, 30), datetime(2027, 3, 28, 4), BERLIN)
    assert found[0].start == datetime(2027, 3, 28, 1, 30, tzinfo=UTC)  # 02:30 CET, which is 03:30 CEST
    assert calendar.bad_windows(found) == []
    empty = calendar.windows(datetime(2027, 3, 28, 2, 0), datetime(2027, 3, 28, 3, 0), BERLIN)
    assert calendar.bad_windows(empty) == empty  # 02:00 CET and 03:00 CEST are one instant


def test_weekly_on_chosen_days_until_a_date_and_by_count():
    rule = calendar.Recurrence(calendar.WEEKLY, (0, 3), until=date(2026, 12, 17))
    found = calendar.windows(datetime(2026, 12, 3, 9), datetime(2026, 12, 3, 17), NEW_YORK, rule)
    days = [calendar.local(w.start, NEW_YORK).date() for w in found]
    assert days == [date(2026, 12, 3), date(2026, 12, 7), date(2026, 12, 10), date(2026, 12, 14), date(2026, 12, 17)]
    assert len(calendar.windows(datetime(2026, 12, 3, 9), datetime(2026, 12, 3, 17), NEW_YORK,
                                calendar.Recurrence(calendar.WEEKLY, (0, 3), count=4))) == 4
    assert not calendar.on_the_rule(datetime(2026, 12, 2, 9), rule)  # a Wednesday


def test_a_rule_without_end_is_cut_after_the_most_windows_so_the_caller_can_refuse_it():
    found = calendar.windows(datetime(2026, 12, 1, 9), datetime(2026, 12, 1, 10), BERLIN,
                             calendar.Recurrence(calendar.DAILY, count=10_000))
    assert len(found) == calendar.MOST_WINDOWS + 1


def test_unit_hours_are_counted_by_local_week_split_at_sunday_midnight():
    # Sunday 22:00 to Monday 02:00 Berlin, 4 units: 2 h in each week.
    found = calendar.windows(datetime(2026, 12, 6, 22), datetime(2026, 12, 7, 2), BERLIN)
    weeks = calendar.unit_hours_by_week(found, 4, BERLIN)
    assert weeks == {date(2026, 11, 30): 8, date(2026, 12, 7): 8}


def test_a_rule_whose_last_date_is_before_its_first_window_gives_none_and_says_why():
    rule = calendar.Recurrence(calendar.DAILY, until=date(2026, 12, 2))
    assert calendar.windows(datetime(2026, 12, 3, 9), datetime(2026, 12, 3, 17), BERLIN, rule) == []
    assert calendar.until_refusal(datetime(2026, 12, 3, 9), rule.until) == (
        "2026-12-02 is before the first window's date, 2026-12-03: the last date must be on or after it")
    assert calendar.until_refusal(datetime(2026, 12, 3, 9), date(2026, 12, 3)) is None
    assert calendar.until_refusal(datetime(2026, 12, 3, 9), None) is None  # a rule by count


def test_only_times_the_calendar_can_compute_with_may_be_booked():
    from django.core.exceptions import ValidationError

    calendar.validate_bookable(calendar.EARLIEST)
    calendar.validate_bookable(calendar.LATEST - timedelta(microseconds=1))
    calendar.validate_bookable(datetime(8999, 12, 31, 23, tzinfo=NEW_YORK))  # its own wall clock is judged
    for moment in (calendar.LATEST, datetime(9999, 12, 31, 22), datetime(1, 1, 1, tzinfo=UTC),
                   calendar.EARLIEST - timedelta(microseconds=1)):
        with pytest.raises(ValidationError, match="a time from 2000-01-01 to before 9000-01-01"):
            calendar.validate_bookable(moment)
