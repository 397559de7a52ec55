"""Reservations' vocabulary: its audit actions (its states are :class:`reservations.models.ReservationState`)."""

from __future__ import annotations


class AuditAction:
    BOOKED = "reservation_booked"
    CANCELLED = "reservation_cancelled"
    APPROVED = "reservation_approved"
    DECLINED = "reservation_declined"


AUDIT_ACTIONS = {
    AuditAction.BOOKED: "Reservation booked",
    AuditAction.CANCELLED: "Reservation cancelled",
    AuditAction.APPROVED: "Reservation approved",
    AuditAction.DECLINED: "Reservation declined",
}
