"""Clusters as data: where workloads can run, whether each cluster answers, and its backend."""
