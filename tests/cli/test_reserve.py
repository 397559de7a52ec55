"""``slipway reserve``: availability, create (once and weekly, open or targeted), ls, cancel, and a refusal's message;
``slipway run --reservation`` — against a live server."""

from __future__ import annotations

from datetime import timedelta

import pytest

from billing.models import ReservedWindow
from jobs.models import TrainingRun
from reservations.models import FlavorPolicy, Reservation
from tests.cli.test_cli import write
from tests.jobs.conftest import run_payload
from tests.reservations.support import clusters_with, next_week_at


@pytest.fixture
def east(flavors):
    return clusters_with(flavors["a100-80gb"], east=16)["east"]


def local(hours: int) -> str:
    return (next_week_at(9) + timedelta(hours=hours)).replace(tzinfo=None).isoformat(timespec="minutes")


def test_it_books_lists_and_cancels_a_weekly_booking(cli, east):
    created = cli("reserve", "create", "--team", "ml-research", "--flavor", "a100-80gb", "--units", "4",
                  "--start", local(0), "--end", local(8), "--tz", "Europe/Berlin", "--weekly", "mon", "--count", "2",
                  "--name", "release-run")
    assert created.exit_code == 0, created.output
    reservation = Reservation.objects.get()
    assert created.stdout.startswith(f"reservation {reservation.pk} release-run: 4\u00d7 a100-80gb on east, ")
    assert f"{local(0)[:10]} 09:00–17:00 Europe/Berlin, 2 windows, booked; price " in created.stdout
    assert ReservedWindow.objects.filter(ref=reservation.ref).count() == 2
    listed = cli("reserve", "ls")
    assert listed.exit_code == 0 and "release-run" in listed.stdout and "Europe/Berlin" in listed.stdout
    free = cli("reserve", "availability", "--flavor", "a100-80gb", "--cluster", "east",
               "--from", next_week_at(8).isoformat(), "--to", next_week_at(18).isoformat())
    assert free.exit_code == 0, free.output
    rows = [line.split() for line in free.stdout.splitlines()[1:]]
    assert [row[-1] for row in rows] == ["8", "4", "8"]  # 08–09 free, 09–17 four taken of eight, 17–18 free
    cancelled = cli("reserve", "cancel", str(reservation.pk))
    assert cancelled.exit_code == 0 and f"reservation {reservation.pk} cancelled" in cancelled.stdout
    assert not ReservedWindow.objects.filter(ref=reservation.ref).exists()


def test_a_dry_run_prices_the_booking_and_books_nothing(cli, east, flavors):
    args = ("reserve", "create", "--team", "ml-research", "--flavor", "a100-80gb", "--units", "4", "--start", local(0),
            "--end", local(8), "--tz", "Europe/Berlin", "--weekly", "mon", "--count", "2", "--name", "release-run")
    previewed = cli(*args, "--dry-run")
    assert previewed.exit_code == 0, previewed.output
    price = flavors["a100-80gb"].price_per_hour
    assert previewed.stdout.strip() == (
        f"would book 4\u00d7 a100-80gb on east, {local(0)[:10]} 09:00–17:00 Europe/Berlin, 2 windows, 64.00 unit-hours, "
        f"booked; price {price * 64:,.2f} USD ({price:,.2f} USD a unit-hour); nothing booked")
    assert not Reservation.objects.exists() and not ReservedWindow.objects.exists()
    # Refused as the booking would be: the fields' words, exit 2.
    refused = cli(*args[:7], "17", *args[8:], "--dry-run")
    assert refused.exit_code == 2 and "east may have at most 8 units of a100-80gb reserved" in refused.output


def test_a_refusal_says_the_limit_and_exits_2(cli, east, flavors):
    FlavorPolicy.objects.create(flavor=flavors["a100-80gb"], max_units=2)
    refused = cli("reserve", "create", "--team", "ml-research", "--flavor", "a100-80gb", "--units", "4",
                  "--start", local(0), "--end", local(1), "--name", "too-big")
    assert refused.exit_code == 2
    assert "at most 2 units of a100-80gb per booking" in refused.output
    assert not Reservation.objects.exists()


def test_a_repeat_without_an_end_is_a_usage_error_before_any_call(cli, east):
    result = cli("reserve", "create", "--team", "ml-research", "--flavor", "a100-80gb", "--units", "1",
                 "--start", local(0), "--end", local(1), "--daily", "--name", "forever")
    assert result.exit_code == 2 and "--until DATE or --count N" in result.output


def test_a_targeted_booking_is_listed_so_and_a_run_names_it_with_reservation(cli, east, tmp_path):
    created = cli("reserve", "create", "--team", "ml-research", "--flavor", "a100-80gb", "--units", "4",
                  "--start", local(0), "--end", local(2), "--tz", "Europe/Berlin", "--matching", "targeted",
                  "--name", "release-run")
    assert created.exit_code == 0, created.output
    reservation = Reservation.objects.get()
    assert reservation.matching == "targeted" and ", booked, targeted; price " in created.stdout
    listed = cli("reserve", "ls")
    assert listed.exit_code == 0 and "MATCHING" in listed.stdout and "targeted" in listed.stdout
    spec = write(tmp_path / "run.yaml", run_payload(gpus_per_worker=4))
    submitted = cli("run", "-f", spec, "--reservation", str(reservation.pk))
    assert submitted.exit_code == 0, submitted.output
    assert "waiting for a window of the reservation it names" in submitted.stdout
    assert TrainingRun.objects.get().for_reservation == reservation.pk
    refused = cli("run", "-f", spec, "--reservation", str(reservation.pk + 1))
    assert refused.exit_code == 2 and f"The team has no reservation #{reservation.pk + 1}." in refused.output


def test_a_matching_the_command_does_not_know_is_a_usage_error(cli, east):
    result = cli("reserve", "create", "--team", "ml-research", "--flavor", "a100-80gb", "--units", "1",
                 "--start", local(0), "--end", local(1), "--matching", "closed", "--name", "x")
    assert result.exit_code == 2 and not Reservation.objects.exists()


def test_the_same_idempotency_key_books_once(cli, east):
    """A booking whose answer was lost, made again with the key its failure named: the first booking, not a second
    one held and billed."""
    args = ["reserve", "create", "--team", "ml-research", "--flavor", "a100-80gb", "--units", "2", "--start", local(0),
            "--end", local(1), "--name", "once", "--idempotency-key", "book-7"]
    first, again = cli(*args), cli(*args)
    assert first.exit_code == 0 and again.exit_code == 0, again.output
    assert first.stdout == again.stdout and Reservation.objects.count() == 1
