"""Template filters of the portal (registered as builtins in settings: every template has them)."""
