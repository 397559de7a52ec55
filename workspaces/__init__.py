"""Workspaces: GPU notebooks that pause when idle — the third workload kind (docs/workspaces.md)."""
