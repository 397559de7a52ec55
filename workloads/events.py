"""Signals the workloads app sends about state moves and alerts, for the apps above it to act on
(docs/architecture.md "Upward: signals").

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

#: Sent *inside* the transaction that makes a preemption's lost-work figures final: the preempting one
#: for a preemption without a grace (``final_when_written``: a spot interruption, an endpoint's burst),
#: and for one with a grace the one in which its pods are found gone
#: (:func:`workloads.cycle.preemption.settle_lost_work`, which lowers the figures first if a checkpoint
#: landed during the grace): ``sender=PreemptionEvent, event=<the preemption row, as final>``. May be
#: sent again by a replayed cycle: the receiver's record is keyed by the row.
preemption_settled = Signal()
