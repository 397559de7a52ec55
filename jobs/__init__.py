"""Training runs: single-node Jobs and distributed PyTorchJobs."""
