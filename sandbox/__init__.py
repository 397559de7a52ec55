"""The simulated GPU cluster: Slipway's embedded default backend."""
