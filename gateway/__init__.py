"""The gateway: Slipway's data plane for endpoints (``manage.py gateway``; docs/serving.md "The gateway")."""
