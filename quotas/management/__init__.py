"""Management commands of the quotas app."""
