"""quotas 0015: the quota ledger's ``Reservation`` becomes ``QuotaHold`` with every row, and its rule still holds
(one unreleased hold per workload)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from tests.db_template import database_at, early_rows

BEFORE, AFTER = [("quotas", "0014_usage_unit_hours")], [("quotas", "0015_quota_hold")]


@pytest.mark.django_db(transaction=True)
def test_the_reservations_rows_are_the_quota_holds_and_one_unreleased_per_workload_still_holds():
    with database_at(BEFORE) as executor:
        old = executor.loader.project_state(BEFORE).apps
        team, _user, flavor = early_rows(old)
        Reservation = old.get_model("quotas", "Reservation")
        Reservation.objects.create(team_id=team.pk, ref="run:1", flavor=flavor, units=4, borrowed_units=1)
        Reservation.objects.create(team_id=team.pk, ref="run:2", flavor=flavor, units=2)

        executor.migrate(AFTER)
        # Its schema's model (later migrations add columns today's model has).
        QuotaHold = executor.loader.project_state(AFTER).apps.get_model("quotas", "QuotaHold")
        assert sorted(QuotaHold.objects.values_list("ref", "units", "borrowed_units")) == [
            ("run:1", 4, 1), ("run:2", 2, 0)]
        assert sorted(QuotaHold.objects.filter(team_id=team.pk, released_at__isnull=True)
                      .values_list("ref", flat=True)) == ["run:1", "run:2"]
        with pytest.raises(IntegrityError), transaction.atomic():
            QuotaHold.objects.create(team_id=team.pk, ref="run:1", flavor_id=flavor.pk, units=1)
        QuotaHold.objects.filter(ref="run:1").update(released_at="2026-11-26T12:00:00Z")
        QuotaHold.objects.create(team_id=team.pk, ref="run:1", flavor_id=flavor.pk, units=1)  # released: a new one may
        with connection.cursor() as cursor:
            tables = connection.introspection.table_names(cursor)
        assert "quotas_quotahold" in tables and "quotas_reservation" not in tables
