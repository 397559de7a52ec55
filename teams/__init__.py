"""Teams, membership, roles, API tokens, audit, idempotency and the team lock: the bottom app."""
