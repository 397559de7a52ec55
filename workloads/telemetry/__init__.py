"""GPU telemetry and alerts: what the reconcile cycle reads of each workload's GPUs and what it makes of it.

- :mod:`workloads.telemetry.readings` keeps the readings (packed series per workload) and compacts them;
- :mod:`workloads.telemetry.series` and :mod:`workloads.telemetry.api` serve them as charts and JSON;
- :mod:`workloads.telemetry.alert_rules` (pure), :mod:`workloads.telemetry.alert_settings` and
  :mod:`workloads.telemetry.alerts` turn them into alert episodes; :mod:`workloads.telemetry.alert_api`
  serves those.

Whether a workload's GPUs are idle is :mod:`workloads.idle`'s rule (billing and the models read it too).
"""
