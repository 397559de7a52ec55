"""Slipway's Kubernetes layer: what every workload kind uses.

Django-free by design: nothing under ``cluster/`` imports Django or any Slipway app.
Shared specs (``specs.py``: cluster settings, flavors, volumes, teams) go in, plain manifest
dicts of the shared pieces (``manifests/``: labels, the hardened pod, secrets, a team's
namespace objects, the device plugin) come out; a backend (``backends/``) applies them and
reports what the cluster really does; ``status.py`` reads the observed pods and
``deployments.py`` maps a Deployment, which more than one kind runs, to a state. A kind's own
specs, builders and status mapping live in its app, on these. Only ``backends/kubernetes.py``
imports the ``kubernetes`` client.
"""
