"""Billing: prices, quota holds and their open segments, the usage ledger, budgets, reports and charts."""
