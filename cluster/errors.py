"""Errors raised by cluster backends.

The rule: no exception of the ``kubernetes`` client (or of the sandbox's storage) leaks
out of ``cluster/``. Backends translate every failure into one of these classes, so the
rest of Slipway decides what to do from the class alone:

* permanent errors (``NotFound``, ``Conflict``, ``Invalid``) fail the request with the
  API server's message; retrying would not help;
* ``Transient`` (5xx, 429, timeouts, connection refused) is retried with backoff by the
  Celery task that called the backend (the only place that retries).
"""

from __future__ import annotations


class ClusterError(Exception):
    """Base class of every error a backend raises."""

    #: Whether retrying the same call later may succeed.
    retryable: bool = False
    #: Whether a backend already told its ``on_error`` of it (:meth:`ClusterBackend.raised`):
    #: an error passing up through two of its methods is counted once.
    reported: bool = False

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def __str__(self) -> str:
        return self.message


class NotFound(ClusterError):
    """The object (or namespace, or CRD) does not exist."""


class Conflict(ClusterError):
    """The object exists in a conflicting state (HTTP 409)."""


class Invalid(ClusterError):
    """The API server (or the sandbox) rejected the object as malformed (HTTP 422/400)."""


class Transient(ClusterError):
    """A failure that may go away by itself: 5xx, 429, timeouts, connection errors."""

    retryable = True
