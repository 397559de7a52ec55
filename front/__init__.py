"""Pages that span workload kinds: dashboard, team, usage, capacity, the staff lists, navigation."""
