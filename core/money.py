"""Money's plumbing every layer shares: its zero and the size of a money column.

Here, below the apps, so admission's pure rule (:mod:`quotas.decide`), the flavors' list prices
(:mod:`fleet.models`) and billing (:mod:`billing`) count money with the same zero and columns.
"""

from __future__ import annotations

from decimal import Decimal

#: Zero, as money and ledger amounts count it (a Decimal).
ZERO = Decimal(0)

#: Prices and costs: up to 99,999,999.9999.
MONEY = {"max_digits": 12, "decimal_places": 4}
