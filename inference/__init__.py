"""Inference endpoints (GPU or MIG-slice Deployments autoscaled by KEDA).

Not built yet: no issue covers endpoints so far. The app exists so the layout of
DESIGN.md §1 holds and the navigation can say so plainly.
"""
