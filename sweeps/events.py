"""The signal the sweeps app sends when a sweep ends, for the apps above it to act on (docs/architecture.md
"Upward: signals").

``sweep_finished`` is sent *inside* the transaction of the sweep's move to a final state (completed, or stopped
once its trials ended: :func:`sweeps.driver.finish_if_done`), with ``sender=Sweep, sweep=<the sweep, as it is
now>, at=<when>``. A move that did not take effect sends nothing. Receivers only write the database:
notifications records the event (its best trial, the money spent and saved) and publishes its fan-out after commit.
"""

from django.dispatch import Signal

sweep_finished = Signal()
