"""The suite's own bookkeeping: what scripts/test.sh selects by marker must exist."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SQLITE_MODULES

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_the_sqlite_pass_names_exists():
    """A renamed or deleted module would drop out of the SQLite pass without a word."""
    missing = [path for path in SQLITE_MODULES if not (ROOT / path).is_file()]
    assert missing == []
