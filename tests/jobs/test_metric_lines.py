"""The stdout metric lines (jobs.metric_lines): Katib's convention, bad lines ignored, never a crash."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.metric_lines import MAX_LINE, MAX_PAIRS, Point, ProgressMark, parse_line, parse_lines

AT = datetime(2026, 11, 24, 7, 22, 6, tzinfo=UTC)


@pytest.mark.parametrize(("line", "points"), [
    ("loss=0.42 accuracy=0.9 step=20", [("loss", 0.42), ("accuracy", 0.9)]),
    ("step=20 loss = 0.42", [("loss", 0.42)]),  # Katib's filter allows spaces around "="
    ("INFO  epoch 1: step=7 Validation-accuracy=0.981 Train_loss=-1.5", [("Validation-accuracy", 0.981),
                                                                       ("Train_loss", -1.5)]),
    ("step=3 lr=3e-4 grad=+1.5E+2 tiny=.5 whole=7", [("lr", 3e-4), ("grad", 150.0), ("tiny", 0.5), ("whole", 7.0)]),
    ("step=3 loss=0.5 loss=0.4", [("loss", 0.4)]),  # a name given twice: the last one
    ("step=3 loss=nan acc=inf big=1e999 ok=1", [("ok", 1.0)]),  # never a NaN or an infinity
    ("step=3 loss=0.4abc x=1.2.3 y=0x1F z=2", [("z", 2.0)]),  # a value glued to more text is none
    ("step=3 train/loss=0.5 a.b=1 |c=2 9lives=3 ok=4", [("ok", 4.0)]),  # not a name of Katib's characters
    ("step=3 path=/ckpt/step-3", []),
])
def test_it_reads_katib_pairs_on_a_line_with_a_step(line, points):
    found, mark = parse_line(line)
    assert mark is None
    assert [(p.name, p.value) for p in found] == points
    assert all(p.step == int(line.split("step")[1].split("=")[1].split()[0].strip()) for p in found)


@pytest.mark.parametrize("line", [
    "loss=0.42 accuracy=0.9",  # no step: no point (a point is per step)
    "step=-1 loss=0.4", "step=1.5 loss=0.4", "step=ten loss=0.4", "mystep=3 loss=0.4",
    f"step={2**63} loss=0.4",  # past the bigint column
    "", "   ", "no pairs at all", "=== step= ===",
    "step=1 " + "x" * MAX_LINE,  # too long a line is skipped whole
])
def test_it_ignores_lines_without_a_readable_step(line):
    assert parse_line(line) == ([], None)


def test_it_takes_the_leading_time_stamp_as_katib_does():
    (point,), _ = parse_line("2026-11-24T07:22:06Z INFO  step=20 loss=2.7044")
    assert point == Point(20, "loss", 2.7044, AT)
    (point,), _ = parse_line("2026-11-24T07:22:06.500+00:00 step=1 loss=1")
    assert point.at == AT.replace(microsecond=500000)
    # Not the first word: no time (Katib's rule), the point still counts.
    (point,), _ = parse_line("INFO 2026-11-24T07:22:06Z step=1 loss=1")
    assert point.at is None
    # The kubelet's stamp (timestamps=true) before the script's own: the first one.
    (point,), _ = parse_line("2026-11-24T07:22:06.000000001Z 2026-11-24T07:22:05Z step=1 loss=1")
    assert point.at == AT


@pytest.mark.parametrize(("line", "mark"), [
    ("SLIPWAY_PROGRESS step=200 total=1000", ProgressMark(200, 1000)),
    ("2026-11-24T07:22:06Z INFO  SLIPWAY_PROGRESS step=0 total=5", ProgressMark(0, 5, AT)),
    ("SLIPWAY_PROGRESS step=5 total=5 loss=0.3", ProgressMark(5, 5)),  # its pairs are not metrics
])
def test_it_reads_progress_lines(line, mark):
    assert parse_line(line) == ([], mark)


@pytest.mark.parametrize("line", [
    "SLIPWAY_PROGRESS step=6 total=5", "SLIPWAY_PROGRESS step=1 total=0", "SLIPWAY_PROGRESS total=5 step=1",
    "SLIPWAY_PROGRESS step=1", "SLIPWAY_PROGRESS step=1.5 total=5", f"SLIPWAY_PROGRESS step=1 total={2**63}",
])
def test_it_ignores_bad_progress_lines(line):
    assert parse_line(line) == ([], None)


def test_it_reads_at_most_max_pairs_of_a_line():
    line = "step=1 " + " ".join(f"m{i}={i}" for i in range(MAX_PAIRS + 10))
    found, _ = parse_line(line)
    assert len(found) == MAX_PAIRS - 1  # the step is one of the pairs read


def test_parse_lines_keeps_the_order_and_the_last_time_stamp():
    parsed = parse_lines(["2026-11-24T07:22:06Z step=1 loss=2", "garbage", None, 42,
                          "SLIPWAY_PROGRESS step=1 total=10", "2026-11-24T07:22:07Z step=2 loss=1.5"])
    assert [(p.step, p.value) for p in parsed.points] == [(1, 2.0), (2, 1.5)]
    assert parsed.progress == [ProgressMark(1, 10)]
    assert parsed.last_at == AT.replace(second=7)
    assert parse_lines(None).points == [] and parse_lines(7).points == []


LINE_PARTS = st.sampled_from(["step=", "loss=", "=", " ", "SLIPWAY_PROGRESS ", "total=", "1", "-", ".", "e", "9" * 25,
                              "nan", "inf", "2026-11-24T07:22:06Z ", "\x00", "é", "\n", "|", "/"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=200), st.lists(LINE_PARTS, max_size=30).map("".join),
                          st.binary(max_size=50), st.integers(), st.none()), max_size=20))
def test_it_never_raises_and_only_yields_storable_points(lines):
    parsed = parse_lines(lines)
    for point in parsed.points:
        assert 0 <= point.step < 2**63 and point.name != "step" and len(point.name) <= 64
        assert point.value == point.value and abs(point.value) != float("inf")
    for mark in parsed.progress:
        assert 0 <= mark.step <= mark.total and mark.total >= 1
