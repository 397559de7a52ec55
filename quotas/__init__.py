"""GPU flavors, prices, team quotas and budgets, admission and the usage ledger."""
