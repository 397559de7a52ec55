"""What a simulated run prints for its metrics and progress (sandbox.training_metrics), read back by
the portal's own parser: the sandbox speaks the convention the portal reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobs.metric_lines import parse_lines
from sandbox.simulation import training_log
from sandbox.training_metrics import lines_since, log_every

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(("raw", "every"), [("0.1", 0.1), ("2s", 2.0), ("10", 10.0), ("", None), ("0.01", None),
                                            ("nan", None), ("fast", None), ("7200", None)])
def test_the_knob_is_read_within_its_bounds(raw, every):
    assert log_every({"SLIPWAY_SIM_LOG_EVERY": raw}) == every


def test_a_run_logging_ten_lines_a_second_reports_every_step_and_reaches_its_total():
    lines = training_log("run-1-abc", image="t:1", started=T0, until=T0 + timedelta(seconds=30), outcome="succeed",
                         finished=True, workers=1, tail=100_000, every=0.1, planned=30)
    parsed = parse_lines(lines)
    loss = [p for p in parsed.points if p.name == "loss"]
    assert len(loss) == 300 and [p.step for p in loss] == list(range(20, 6001, 20))
    assert loss[0].at == T0 + timedelta(seconds=0.1) and loss[-1].value < loss[0].value
    assert parsed.progress[-1].step == parsed.progress[-1].total == 6000
    assert "2026-11-22T10:00:00.100Z INFO  step=20 loss=" in lines[4]


def test_without_a_plan_it_prints_no_progress_and_lines_since_keeps_from_the_second():
    lines = training_log("run-1-abc", image="t:1", started=T0, until=T0 + timedelta(seconds=60), outcome="succeed",
                         finished=False, workers=1, tail=1000)
    assert not parse_lines(lines).progress and len(parse_lines(lines).points) == 6 * 3
    kept = lines_since(lines, T0 + timedelta(seconds=40, microseconds=5))
    assert [line[:20] for line in kept] == ["2026-11-22T10:00:40Z", "2026-11-22T10:00:50Z", "2026-11-22T10:01:00Z"]
