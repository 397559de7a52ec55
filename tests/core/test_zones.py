"""A time zone's name (``core.zones``), the one check the reservations API, the booking form and a team's time zone
share: any name that is not a zone is a ``ValueError`` (a field error), never another exception (a 500)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from core.zones import validate_time_zone, zone_named
from teams.models import Team

NOT_ZONES = [
    "Europe", "America", "Etc", "__pycache__",  # directories of tzdata: IsADirectoryError
    "Europe/", "Europe//Berlin", "./UTC", "..", "../../etc/passwd", "/etc/localtime",  # paths ZoneInfo refuses
    "zone.tab", "Europe/__init__.py",  # files of tzdata that are no zone
    "Europe/Berlin\x00", " UTC", "Europe\\Berlin", "Mars/Olympus", "",
    "Europe/" + "x" * 300,  # too long a file name: OSError
]


@pytest.mark.parametrize("name", NOT_ZONES)
def test_a_name_that_is_no_zone_is_refused_saying_what_a_name_is(name):
    with pytest.raises(ValueError, match=r"unknown time zone .*: an IANA name such as Europe/Berlin"):
        zone_named(name)


@pytest.mark.parametrize("name", [n for n in NOT_ZONES if n])
def test_a_teams_time_zone_that_is_no_zone_is_the_fields_error(name):
    with pytest.raises(ValidationError, match="unknown time zone"):
        validate_time_zone(name)
    with pytest.raises(ValidationError, match="unknown time zone"):
        Team._meta.get_field("time_zone").run_validators(name)


@pytest.mark.parametrize("name", ["Europe/Berlin", "UTC", "Etc/GMT+5", "America/Port-au-Prince",
                                  "America/Argentina/ComodRivadavia", "EST5EDT"])
def test_zones_of_every_shape_are_read(name):
    assert zone_named(name).key == name
    validate_time_zone(name)
