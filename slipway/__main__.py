"""``python -m slipway``: the ``slipway`` command where no console script is installed."""

from slipway.cli import main

main()
