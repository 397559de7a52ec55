"""The glossary's table of states (docs/glossary.md "States") has a column for every kind, true to its model.

The four sets of states mean one thing for every kind; the table spells each kind's states of them. A kind
added without its column (``manage.py startkind`` writes it), or states renamed under the table, fail here.
Only the rows a state list answers are compared: "queued" (the kind's ``lifecycle.queued``) and "holding" (its
``HOLDING_STATES``); "active" and "unfinished" are said in words ("the four above").
"""

from __future__ import annotations

import re

from tests.docs import scan
from tests.test_kind_boundaries import project_kinds

HEADER = "| word | means | in the code |"


def states_table() -> dict[str, dict[str, set[str]]]:
    """``{column heading: {row word: the states it lists}}`` of the table (``queued`` → ``{"queued"}``)."""
    lines = (scan.REPO / "docs" / "glossary.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADER))
    headings = [cell.strip() for cell in lines[start].strip("|").split("|")]
    table: dict[str, dict[str, set[str]]] = {heading: {} for heading in headings}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        word = re.sub(r"\*\*(\w+)\*\*.*", r"\1", cells[0])
        for heading, cell in zip(headings, cells, strict=True):
            table[heading][word] = set(re.findall(r"`([a-z_]+)`", cell))
    return table


def test_every_kind_has_a_column_listing_its_queued_and_holding_states():
    table = states_table()
    for kind in project_kinds():
        column = table.get(f"{kind.noun} states")
        assert column is not None, f"docs/glossary.md's table of states has no column '{kind.noun} states'"
        assert column["queued"] == {kind.lifecycle.queued}, kind.noun
        assert column["holding"] == set(kind.model.HOLDING_STATES), kind.noun


def test_it_reads_the_table():
    table = states_table()
    assert {"queued", "holding", "active", "unfinished"} <= set(table["word"])
    assert len([heading for heading in table if heading.endswith(" states")]) >= 3
