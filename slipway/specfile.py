"""A spec's text — a run's, an endpoint's or a sweep's file — read as the API's fields: JSON, or YAML restricted to
the values JSON has.

YAML has values JSON has not: an unquoted date or time (``2024-01-01``), ``.nan`` and ``.inf``, ``!!binary``,
``!!set``, keys that are numbers or booleans. PyYAML's safe loader turns them into Python dates, NaN, bytes and sets,
which cannot be sent as the API's JSON (the client's encoder raises, or writes a NaN no JSON parser takes). Each is
refused here at its line, with what to write instead; so are strings the portal cannot store (a NUL, a lone UTF-16
surrogate, both reachable through YAML's and JSON's escapes) and aliases expanded past :data:`MAX_VALUES` values
(a few lines of ``&a [*b, *b, …]`` can stand for billions).

Text that parses as JSON is read as JSON, by JSON's rules: YAML reads most JSON, but not a tab before a key, and it
reads ``1e-5`` as text. Anything else is read as YAML.

Pure, with no Click and no HTTP: the command line reads spec files with it (:func:`slipway.specs.load_spec`), and
the portal's New sweep form the spec typed into it, so both refuse the same text with the same words.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import yaml

#: The most values a spec may hold once its aliases are expanded (a sweep file holds a few dozen).
MAX_VALUES = 100_000


class SpecError(ValueError):
    """Why a spec's text cannot be read; ``line`` and ``column`` (1-based) say where, when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.message, self.line, self.column = message, line, column

    @property
    def where(self) -> str:
        """``", line 3, column 7"`` (``""`` when the place is unknown): what follows a file's name."""
        if self.line is None:
            return ""
        return f", line {self.line}" + (f", column {self.column}" if self.column is not None else "")

    def __str__(self) -> str:
        return f"{self.where.removeprefix(', ')}: {self.message}" if self.line is not None else self.message


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be a string of a spec (the portal stores it as UTF-8 text), or None."""
    if "\x00" in text:
        return "a string holds a NUL character (\\0), which no field may"
    if any("\ud800" <= char <= "\udfff" for char in text):
        return "a string holds a lone UTF-16 surrogate (\\ud800–\\udfff), which is no Unicode character"
    return None


class _Refused(yaml.MarkedYAMLError):
    def __init__(self, problem: str, node: yaml.Node, *, by_field: bool = False) -> None:
        super().__init__(problem=problem, problem_mark=node.start_mark)
        #: ``by_field``: the problem is worded after the field's name (:func:`_field_of` finds it).
        self.node, self.by_field = node, by_field


def _field_of(root: yaml.Node, target: yaml.Node) -> str:
    """The field that holds ``target`` in ``root``'s document: ``run.max_runtime_minutes``, ``choices.0``."""
    stack = [(root, "")]
    while stack:
        node, field = stack.pop()
        if node is target:
            return field or "the value"
        if isinstance(node, yaml.MappingNode):
            stack += [(value, f"{field}.{key.value}" if field else str(key.value)) for key, value in node.value]
        elif isinstance(node, yaml.SequenceNode):
            stack += [(item, f"{field}.{index}" if field else str(index)) for index, item in enumerate(node.value)]
    return "a value"


def _refuse(words: str):
    """A constructor for a tag whose value JSON has not: it refuses the node with ``words``."""

    def construct(loader, node):
        raise _Refused(words.format(value=node.value if isinstance(node, yaml.ScalarNode) else ""), node)

    return construct


class _JsonValues(yaml.SafeLoader):
    """PyYAML's safe loader, refusing each value JSON has not at the node that holds it."""

    def construct_yaml_str(self, node):
        value = super().construct_yaml_str(node)
        problem = text_problem(value)
        if problem:
            raise _Refused(problem, node)
        return value

    def construct_yaml_float(self, node):
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise _Refused(
                f"{node.value} is not a number JSON has (no NaN or infinity): write a number, or quote "
                "it if it is text",
                node,
            )
        return value

    def construct_yaml_int(self, node):
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # more digits than Python reads as a number: no JSON parser takes it either
            raise _Refused(_number_problem(_TooLong(node.value)), node, by_field=True) from None

    def construct_mapping(self, node, deep=False):
        mapping = super().construct_mapping(node, deep=deep)  # merges (<<) flattened into node.value first
        for key_node, _value in node.value:
            key = self.construct_object(key_node)
            if not isinstance(key, str):
                raise _Refused(
                    f'the key {key_node.value} is not text, and JSON\'s keys are: quote it ("{key_node.value}")',
                    key_node,
                )
        return mapping


_JsonValues.add_constructor("tag:yaml.org,2002:str", _JsonValues.construct_yaml_str)
_JsonValues.add_constructor("tag:yaml.org,2002:float", _JsonValues.construct_yaml_float)
_JsonValues.add_constructor("tag:yaml.org,2002:int", _JsonValues.construct_yaml_int)
_JsonValues.add_constructor(
    "tag:yaml.org,2002:timestamp",
    _refuse('{value} is a date or a time, which JSON has no value for: quote it ("{value}")'),
)
_JsonValues.add_constructor(
    "tag:yaml.org,2002:binary", _refuse("!!binary is bytes, which JSON has no value for: write the text itself")
)
_JsonValues.add_constructor("tag:yaml.org,2002:set", _refuse("!!set is no JSON value: write a list"))
_JsonValues.add_constructor("tag:yaml.org,2002:omap", _refuse("!!omap is no JSON value: write a mapping"))
_JsonValues.add_constructor("tag:yaml.org,2002:pairs", _refuse("!!pairs is no JSON value: write a mapping"))


def _count(root: yaml.Node) -> None:
    """Refuse a document whose aliases expand past :data:`MAX_VALUES` values (each alias counted where it is used)."""
    stack, seen = [root], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise SpecError(f"it holds more than {MAX_VALUES:,} values once its aliases (*name) are expanded")
        if isinstance(node, yaml.MappingNode):
            stack += [item for pair in node.value for item in pair]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value


def _from_yaml(text: str) -> Any:
    loader = _JsonValues(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _count(node)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = ", ".join(filter(None, (exc.context, exc.problem))) or "not YAML"  # "while parsing …, expected …"
        if isinstance(exc, _Refused) and exc.by_field:
            message = f"{_field_of(node, exc.node)} {message}"
        if mark is None:
            raise SpecError(message) from None
        raise SpecError(message, mark.line + 1, mark.column + 1) from None
    except yaml.YAMLError as exc:
        raise SpecError(str(exc)) from None
    finally:
        loader.dispose()


def _not_a_number(name: str):
    raise SpecError(f"{name} is not a number JSON has (no NaN or infinity)")


class _TooLong(str):
    """An integer's digits past what Python reads as a number (``sys.get_int_max_str_digits``): kept as the text
    it is until the walk of :func:`_from_json` refuses it by its field."""


def _integer(digits: str) -> int | _TooLong:
    try:
        return int(digits)
    except ValueError:
        return _TooLong(digits)


def _number_problem(value: Any) -> str | None:
    """Why ``value`` is a number no JSON answer carries, or None: an infinity (``1e999`` reads as one), an integer
    of more digits than a parser takes."""
    if isinstance(value, _TooLong):
        return (f"is an integer of {len(value.lstrip('-')):,} digits, more than a number JSON carries may have "
                f"({sys.get_int_max_str_digits():,})")
    if isinstance(value, float) and not math.isfinite(value):
        return "is too large a number for JSON (it reads as infinity): write a smaller one, or quote it if it is text"
    return None


def _from_json(text: str) -> Any:
    """``text`` read as JSON; ``json.JSONDecodeError`` when it is none (then it is read as YAML)."""
    value = json.loads(text, parse_constant=_not_a_number, parse_int=_integer)
    stack = [(value, "")]
    while stack:
        item, field = stack.pop()
        if isinstance(item, dict):
            stack += [(key, field) for key in item]
            stack += [(child, f"{field}.{key}" if field else key) for key, child in item.items()]
        elif isinstance(item, list):
            stack += [(child, f"{field}.{index}" if field else str(index)) for index, child in enumerate(item)]
        elif (problem := _number_problem(item)) is not None:
            raise SpecError(f"{field or 'the value'} {problem}")
        elif isinstance(item, str) and (problem := text_problem(item)):
            raise SpecError(problem)
    return value


def read(text: str) -> Any:
    """The value ``text`` holds, of JSON's values only (module docstring); ``SpecError`` says why not."""
    try:
        try:
            return _from_json(text)
        except json.JSONDecodeError:
            return _from_yaml(text)
    except RecursionError:
        raise SpecError("it is nested too deeply") from None


def _what(value: Any) -> str:
    if value is None:
        return "nothing (it is empty)"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "text"
    if isinstance(value, bool):
        return "true or false"
    return "a number"


def read_fields(text: str, example: str = "name: …, image: …") -> dict:
    """The fields ``text`` holds as a mapping, as the API takes them; ``SpecError`` says why not. ``example``: the
    fields the mapping's words show."""
    value = read(text)
    if not isinstance(value, dict):
        raise SpecError(f"expected the API's fields as a mapping ({example}), not {_what(value)}")
    return value
