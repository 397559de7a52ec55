"""Inference endpoints: a workload kind of GPU or MIG-slice Deployments autoscaled by KEDA.

An endpoint reserves its ``min_replicas`` at admission and is granted burst replicas up to
``max_replicas`` while it runs (:mod:`inference.scaling`); :mod:`inference.kind` registers it
with the shared workload machinery (:mod:`workloads`).
"""
