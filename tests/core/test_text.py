"""core.text: the checks on text every input path shares."""

from __future__ import annotations

import pytest

from core.text import whole_number


@pytest.mark.parametrize("raw, number", [
    ("0", 0), ("42", 42), ("0042", 42), ("0" * 5000 + "7", 7), ("000", 0),
    ("9223372036854775807", 9223372036854775807), (42, 42),
])
def test_a_whole_number_in_ascii_digits_is_read(raw, number):
    assert whole_number(raw) == number


@pytest.mark.parametrize("raw", ["", "-1", "+1", " 1", "1 ", "1.5", "1e3", "0x10", "1_000", "\u00b2", "\u0663", "ten"])
def test_anything_else_is_no_number(raw):
    # "²".isdigit() is True, and int("٣") (an Arabic-Indic three) is 3.
    assert whole_number(raw) is None


def test_a_number_of_more_digits_than_allowed_is_never_given_to_int():
    assert whole_number("9" * 19) == 10**19 - 1
    assert whole_number("9" * 20) is None
    assert whole_number("9" * 4400) is None  # int() would raise ValueError in Python's own words
    assert whole_number("1234", 3) is None and whole_number("0123", 3) == 123
    assert whole_number("9" * 4400, longer=201) == 201
    assert whole_number("abc", longer=201) is None
