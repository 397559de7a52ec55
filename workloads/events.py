"""Signals the workloads app sends about state moves and alerts, for the apps above it to act on.

``workload_moved`` is sent *inside* the transaction of a conditional state move that took
effect (the reconcile cycle's observed moves, :func:`workloads.lifecycle.fail`), with
``sender=<the kind's model>, workload=..., state=<the new state>, reason=..., at=<when>``.
A cycle replayed, or racing a user's action, moves nothing and so sends nothing: a receiver
that writes a row in the handler records each move exactly once, committed or rolled back with
it. Receivers must only write the database (never publish, never call out): publishing happens
after commit. workloads never imports its receivers (notifications connects to this signal).
"""

from django.dispatch import Signal

workload_moved = Signal()

#: Sent *inside* the transaction of an alert episode's move to open (:mod:`workloads.telemetry.alerts`), once
#: per episode: ``sender=AlertEpisode, episode=<the episode as it opened>, workload=<its workload,
#: with team and flavor>``. The receiver records the episode's one message.
alert_opened = Signal()

#: Sent *inside* the transaction that makes a preemption's lost-work figures final — when the pods of
#: a workload preempted with a grace are gone (:func:`workloads.cycle.preemption.settle_lost_work`, which
#: lowers them first if a checkpoint landed during the grace): ``sender=PreemptionEvent,
#: event=<the preemption row, as final>``. A preemption without a grace (``final_when_written``) is
#: final when its row is written and sends nothing here. May be sent again by a replayed cycle: the
#: receiver's record is keyed by the row.
preemption_settled = Signal()
