"""Slipway's Kubernetes layer.

Django-free by design: nothing under ``cluster/`` imports Django or any Slipway app.
Specs (``specs.py``) go in, plain manifest dicts (``manifests/``) come out; a backend
(``backends/``) applies them and reports what the cluster really does; ``status.py``
maps those observations to portal states. Only ``backends/kubernetes.py`` imports the
``kubernetes`` client.
"""
