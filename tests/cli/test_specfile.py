"""A spec's text read as the API's fields (slipway.specfile): JSON by JSON's rules, YAML only with JSON's values, each
refusal with its line. Pure: no server."""

from __future__ import annotations

import pytest

from slipway.specfile import MAX_VALUES, SpecError, read, read_fields


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("since: 2024-01-01", "line 1, column 8: 2024-01-01 is a date or a time"),
        ("at: 2024-01-01T10:00:00Z", "line 1, column 5: 2024-01-01T10:00:00Z is a date or a time"),
        ("a:\n  b: .nan", "line 2, column 6: .nan is not a number JSON has"),
        ("a: -.inf", "line 1, column 4: -.inf is not a number JSON has"),
        ("a: !!binary aGVsbG8=", "line 1, column 4: !!binary is bytes"),
        ("a: !!set {x}", "line 1, column 4: !!set is no JSON value"),
        ("a: !!omap [b: 1]", "line 1, column 4: !!omap is no JSON value"),
        ("a: !!python/object/apply:os.system [true]", "line 1, column 4: could not determine a constructor"),
        ("1: one", "line 1, column 1: the key 1 is not text"),
        ("yes: 1", "line 1, column 1: the key yes is not text"),
        ('a: "\\0"', "line 1, column 4: a string holds a NUL character"),
        ('a: "\\ud800"', "line 1, column 4: a string holds a lone UTF-16 surrogate"),
        ('{"a": "\\u0000"}', "a string holds a NUL character"),
        ('{"a": NaN}', "NaN is not a number JSON has"),
        ('{"a": -Infinity}', "-Infinity is not a number JSON has"),
        ("a: [1, 2", "line 1, column 9: while parsing a flow sequence, expected ',' or ']'"),
        ("a: b\n---\nc: d", "line 2, column 1: expected a single document in the stream, but found another document"),
        ("[" * 5000, "it is nested too deeply"),
    ],
)
def test_what_json_has_not_is_refused_where_it_is(text, said):
    with pytest.raises(SpecError) as refused:
        read(text)
    assert str(refused.value).startswith(said), str(refused.value)


def test_aliases_are_expanded_within_a_bound():
    """A billion values in six lines (each alias counted where it is used) is refused before it is built."""
    lines = ["a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for name, prior in zip("bcdefghi", "abcdefgh", strict=True):
        lines.append(f"{name}: &{name} [{', '.join([f'*{prior}'] * 10)}]")
    with pytest.raises(SpecError, match=f"more than {MAX_VALUES:,} values"):
        read("\n".join(lines))
    assert read("base: &base {image: x}\nrun:\n  <<: *base\n  flavor: l4") == {
        "base": {"image": "x"},
        "run": {"image": "x", "flavor": "l4"},
    }


def test_json_is_read_by_jsons_rules_and_yaml_by_yamls():
    assert read('{\n\t"min": 1e-5,\n\t"ok": true\n}') == {"min": 1e-5, "ok": True}  # a tab, an exponent: JSON's
    assert read("min: 0.00001\nchoices: [16, 32]\nname: 'x'") == {"min": 1e-5, "choices": [16, 32], "name": "x"}


@pytest.mark.parametrize(
    ("text", "what"),
    [("- a", "a list"), ("", "nothing (it is empty)"), ("word", "text"), ("3", "a number"), ("true", "true or false")],
)
def test_fields_are_a_mapping(text, what):
    with pytest.raises(SpecError) as refused:
        read_fields(text, "run: …")
    assert str(refused.value) == f"expected the API's fields as a mapping (run: …), not {what}"
    assert read_fields("name: a") == {"name": "a"}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"run": {"max_runtime_minutes": 1e999}}', "run.max_runtime_minutes is too large a number for JSON"),
        ('{"choices": [1, -1e999]}', "choices.1 is too large a number for JSON"),
        ('{"seed": ' + "9" * 5000 + "}", "seed is an integer of 5,000 digits"),
        ("run:\n  seed: " + "9" * 5000, "line 2, column 9: run.seed is an integer of 5,000 digits"),
    ],
)
def test_a_number_json_cannot_carry_is_refused_by_its_field(text, said):
    with pytest.raises(SpecError) as refused:
        read(text)
    assert str(refused.value).startswith(said), str(refused.value)
