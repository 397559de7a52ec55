"""Notifications: e-mail and signed webhooks about a team's runs, endpoints, budget and queue (docs/notifications.md)."""
