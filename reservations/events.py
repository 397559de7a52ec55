"""The signal the reservations app sends about a booking's moves, for the apps above it to act on
(docs/architecture.md "Upward: signals").

``reservation_moved`` is sent *inside* the transaction of a booking's move that took effect — booked
(pending or booked at once), approved, declined, cancelled — with ``sender=Reservation,
reservation=<the booking, as it is now>, move=<one of MOVES>, at=<when>``. A move that did not take
effect (a racing cancel) sends nothing. Receivers only write the database: notifications records the event
and publishes its fan-out after commit.
"""

from django.dispatch import Signal

BOOKED, APPROVED, DECLINED, CANCELLED = "booked", "approved", "declined", "cancelled"
MOVES = (BOOKED, APPROVED, DECLINED, CANCELLED)

reservation_moved = Signal()
