"""The sandbox's simulated controllers, one module each, run in order by :mod:`sandbox.tick`.

Each works on the tick's :class:`sandbox.world.World` (records loaded once, changes collected):

* :mod:`~sandbox.controllers.kubelet` — pods' lifecycle on their node, and stopping/deleting pods;
* :mod:`~sandbox.controllers.quota` — ResourceQuota: usage, admission of new pods, status;
* :mod:`~sandbox.controllers.job` — batch/v1 Jobs;
* :mod:`~sandbox.controllers.pytorchjob` — Kubeflow PyTorchJobs (gangs restarted as one);
* :mod:`~sandbox.controllers.trainjob` — Kubeflow Trainer v2's TrainJobs (a JobSet on the cluster's runtime);
* :mod:`~sandbox.controllers.deployment` — Deployments and their ReplicaSet's pods;
* :mod:`~sandbox.controllers.scaledobject` — KEDA ScaledObjects and their HPA (replica targets);
* :mod:`~sandbox.controllers.scheduling` — binding pods to nodes with :mod:`sandbox.scheduler`.
"""
