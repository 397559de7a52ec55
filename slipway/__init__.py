"""The ``slipway`` command line and Python client: a thin HTTP client of the REST API (/api/v1/).

It imports nothing from the portal's own packages, so it can be installed and used anywhere
the API is reachable (docs/api.md is the contract it follows).
"""
