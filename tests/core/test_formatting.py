"""One format for times (``2026-11-23 14:05 UTC``) and one for money (``12,345.67 USD``), everywhere in the portal."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.template import engines
from django.test import override_settings

from core.formatting import count_of, format_amount, format_duration, format_money, format_when, plain_amount
from jobs import services as run_services
from jobs.models import TrainingRun
from tests.factories import make_user
from tests.jobs.conftest import run_payload

MOMENT = datetime(2026, 11, 23, 14, 5, 7, tzinfo=UTC)
TEMPLATES = Path(settings.BASE_DIR) / "templates"

# -- the rules ---------------------------------------------------------------------------


def test_it_writes_a_time_with_its_zone():
    assert format_when(MOMENT) == "2026-11-23 14:05 UTC"
    assert format_when(MOMENT, "seconds") == "2026-11-23 14:05:07 UTC"


@override_settings(TIME_ZONE="Europe/Berlin")
def test_it_writes_a_time_in_the_portals_zone():
    assert format_when(MOMENT) == "2026-11-23 15:05 CET"
    assert format_when(datetime(2026, 7, 1, 12, 0, tzinfo=UTC)) == "2026-07-01 14:00 CEST"


def test_it_reads_the_clusters_rfc3339_times():
    assert format_when("2026-11-23T14:05:07Z", "seconds") == "2026-11-23 14:05:07 UTC"
    assert format_when("") == "—" and format_when(None) == "—"
    assert format_when("yesterday-ish") == "yesterday-ish"  # shown as it came, never a 500


@pytest.mark.parametrize(("amount", "text"), [
    (Decimal("12345.678"), "12,345.68 USD"),
    (Decimal("0.125"), "0.13 USD"),  # half up, as the reports round
    (Decimal("1234567"), "1,234,567.00 USD"),
    (Decimal("-0.001"), "0.00 USD"),
    (8.2, "8.20 USD"),
    ("20000", "20,000.00 USD"),
    (0, "0.00 USD"),
    (None, "—"),
])
def test_it_writes_money_with_separators_cents_and_currency(amount, text):
    assert format_money(amount) == text


@pytest.mark.parametrize(("amount", "text"), [
    (Decimal("0E-10"), "0.00"),  # the showback CSV wrote this for zero
    (Decimal("12345.678"), "12345.68"),
    (Decimal("0.125"), "0.13"),  # half up, as on the pages
    (Decimal("-0.001"), "0.00"),
    (Decimal("1E+3"), "1000.00"),
    (None, ""),
])
def test_files_get_the_same_cents_without_separators(amount, text):
    assert plain_amount(amount) == text


@pytest.mark.parametrize(("span", "text"), [
    (timedelta(seconds=45), "45 s"),
    (timedelta(seconds=90), "1 min 30 s"),
    (timedelta(minutes=42, seconds=10), "42 min"),
    (timedelta(hours=2, minutes=5), "2 h 05 min"),
    (timedelta(days=3, hours=4, minutes=59), "3 d 4 h"),
    (timedelta(seconds=-3), "0 s"),
    (600, "10 min"),
    (None, "—"),
])
def test_it_writes_a_duration_in_the_largest_units_that_matter(span, text):
    assert format_duration(span) == text


def test_it_names_another_currency_and_follows_the_setting(settings):
    assert format_money(Decimal("5"), "EUR") == "5.00 EUR"
    settings.SLIPWAY_CURRENCY = "CHF"
    assert format_money(Decimal("5")) == "5.00 CHF"


def test_unit_prices_keep_the_tail_that_matters():
    assert format_amount(Decimal("0.5857"), precise=True) == "0.5857"
    assert format_amount(Decimal("4.1000"), precise=True) == "4.10"
    assert format_amount(Decimal("0.5857")) == "0.59"


def test_every_template_has_the_filters():
    template = engines["django"].from_string("{{ at|when }} · {{ at|when:'seconds' }} · {{ cost|money }} · "
                                             "{{ cost|money:'EUR' }}")
    assert template.render({"at": MOMENT, "cost": Decimal("1234.5")}) == (
        "2026-11-23 14:05 UTC · 2026-11-23 14:05:07 UTC · 1,234.50 USD · 1,234.50 EUR")


def test_the_token_command_prints_the_expiry_in_the_one_format(db):
    make_user("tess")
    err = StringIO()
    call_command("create_api_token", "tess", "--expires-days", "3", stdout=StringIO(), stderr=err)
    assert re.search(r"expires \d{4}-\d\d-\d\d \d\d:\d\d UTC\)", err.getvalue()), err.getvalue()


# -- the pages ---------------------------------------------------------------------------


@pytest.fixture
def expensive_run(member, team, quota, published):
    run = run_services.submit_run(member, team, {k: v for k, v in run_payload().items() if k != "team"})
    TrainingRun.objects.filter(pk=run.pk).update(billed_cost=Decimal("12345.678"), created_at=MOMENT)
    return run


@pytest.mark.django_db
def test_the_run_pages_show_time_and_money_in_the_one_format(client, member, expensive_run):
    client.force_login(member)
    listing = client.get("/runs/").content.decode()
    assert "2026-11-23 14:05 UTC" in listing and "12,345.68 USD" in listing
    detail = client.get(f"/runs/{expensive_run.pk}/").content.decode()
    assert "2026-11-23 14:05:07 UTC by mia" in detail and "12,345.68 USD" in detail
    assert "8.20 USD per hour" in detail
    dashboard = client.get("/").content.decode()
    assert "2026-11-23 14:05 UTC" in dashboard and "100,000.00 USD" in dashboard


@pytest.mark.django_db
@override_settings(TIME_ZONE="Asia/Tokyo")
def test_the_pages_follow_the_portals_zone(client, member, expensive_run):
    client.force_login(member)
    assert "2026-11-23 23:05 JST" in client.get("/runs/").content.decode()


# -- no other way in the templates ----------------------------------------------------------

#: Ways of writing a time or an amount of money other than ``when`` and ``money``. ``|date:'c'``
#: inside a ``datetime="…"`` attribute is machine-readable, not shown, and allowed.
OTHER_WAYS = re.compile(
    r"\|(date|time|timesince|timeuntil|naturaltime|naturalday)\b"
    r"|floatformat[^}]*\}\}\s*(<small>)?\s*\{\{\s*[\w.]*currency"
)
MACHINE_TIME = re.compile(r"datetime=\"\{\{ [\w.]+\|date:'c' \}\}\"")


def other_ways(line: str) -> bool:
    return bool(OTHER_WAYS.search(MACHINE_TIME.sub("", line)))


def test_no_template_formats_times_or_money_another_way():
    offenders = []
    for path in sorted(TEMPLATES.rglob("*.html")):
        name = path.relative_to(TEMPLATES).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if other_ways(line):
                offenders.append(f"{name}:{number}: {line.strip()[:100]}")
    assert offenders == []


def test_the_lint_catches_the_old_ways():
    assert other_ways('{{ run.created_at|date:"Y-m-d" }}')
    assert other_ways("{{ run.created_at|timesince }} ago")
    assert other_ways("{{ run.cost|floatformat:2 }} {{ currency }}")
    assert other_ways("{{ b.spent|floatformat:2 }} <small>{{ budget.currency }}</small>")
    assert other_ways("<time datetime=\"{{ at|date:'c' }}\">{{ at|date:'H:i' }}</time>")
    assert not other_ways("<time datetime=\"{{ at|date:'c' }}\">{{ at|when }}</time>")
    assert not other_ways("{{ run.cost|money }} · {{ run.created_at|when }} · {{ hours|floatformat:2 }}")


@pytest.mark.django_db
def test_the_admin_budget_list_shows_spent_money_in_the_one_format(client, staff, team, quota):
    client.force_login(staff)
    html = client.get("/admin/billing/teambudget/").content.decode()
    assert "0.00 USD" in html


def test_a_count_takes_its_noun_in_the_right_number():
    assert [count_of(n, "replica") for n in (0, 1, 2)] == ["0 replicas", "1 replica", "2 replicas"]
    assert count_of(1, "body", "bodies") == "1 body" and count_of(3, "body", "bodies") == "3 bodies"


def test_audited_amounts_are_written_as_the_columns_store_them():
    from core.formatting import stored_amount

    assert stored_amount(Decimal("4.1")) == "4.1000"
    assert stored_amount("0.58571") == "0.5857"
    assert stored_amount(None) is None
