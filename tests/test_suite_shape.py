"""The suite's own bookkeeping: what scripts/test.sh selects by marker must exist."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SECOND_LANE, SQLITE_MODULES

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_the_sqlite_pass_names_exists():
    """A renamed or deleted module would drop out of the SQLite pass without a word."""
    missing = [path for path in SQLITE_MODULES if not (ROOT / path).is_file()]
    assert missing == []


def test_every_module_of_the_second_lane_exists_and_is_slow():
    """A renamed module would fall back to the first lane without a word, and an unmarked one would
    run outside the lanes (the two 64-connection modules beside each other)."""
    missing = [path for path in SECOND_LANE if not (ROOT / path).is_file()]
    assert missing == []
    unmarked = [path for path in SECOND_LANE if "pytest.mark.slow" not in (ROOT / path).read_text()]
    assert unmarked == []
