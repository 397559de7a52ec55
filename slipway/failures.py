"""How a ``slipway`` verb fails: its exit codes (docs/api.md), one clean message with its code
(:class:`Failure`, never a traceback), and the API's refusals turned into those (:func:`refusals`).
"""

from __future__ import annotations

import contextlib
import uuid

import click

from slipway.client import Ambiguous, ApiError, ConnectionFailed, Forbidden, NotFound, NotJson, NotSignedIn

# Exit codes (docs/api.md): 0 ok; 1 a watched workload failed (and what no other code names: another
# refusal of the API, an unreachable server); 2 a usage error — Click's own, a spec file that
# cannot be read, a spec the API refuses (400, or a dry run's "reject") —, so a script tells "my
# spec was wrong" from "my run failed"; 3 not signed in; 4 not found or forbidden; 130 stopped by
# Ctrl-C while watching (the shell's 128 + SIGINT), so a stopped watch is not read as a failed run.
EXIT_FAILED, EXIT_USAGE, EXIT_NOT_SIGNED_IN, EXIT_NOT_FOUND, EXIT_INTERRUPTED = 1, 2, 3, 4, 130

#: Answers after which a create may or may not have happened: a gateway's (the API may have done it
#: behind it) — with an unreachable server, a timeout and a 2xx that is not the API's JSON.
OUTCOME_UNKNOWN_STATUSES = frozenset({502, 503, 504})


class Failure(click.ClickException):
    """A refusal or failure shown as one clean message (never a traceback) with its exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@contextlib.contextmanager
def refusals():
    """The API's refusals as clean messages with their exit codes (docs/api.md)."""
    try:
        yield
    except NotSignedIn as exc:
        raise Failure(str(exc), EXIT_NOT_SIGNED_IN) from exc
    except (NotFound, Forbidden) as exc:
        raise Failure(str(exc), EXIT_NOT_FOUND) from exc
    except Ambiguous as exc:  # a name that says no one run or endpoint: the caller's to say better
        raise Failure(str(exc), EXIT_USAGE) from exc
    except ApiError as exc:
        raise Failure(str(exc)) from exc


def outcome_unknown(exc: ApiError) -> bool:
    """Whether a write that raised ``exc`` may have been done all the same (:data:`OUTCOME_UNKNOWN_STATUSES`)."""
    if isinstance(exc, ConnectionFailed):
        return True
    if isinstance(exc, NotJson):
        return 200 <= exc.status < 300
    return exc.status in OUTCOME_UNKNOWN_STATUSES


def idempotency_key(given: str | None) -> str:
    """The key a create sends: the caller's (``--idempotency-key``), else a fresh one, known before the call so
    that :func:`creating` can name it."""
    return given or str(uuid.uuid4())


@contextlib.contextmanager
def creating(noun: str, key: str):
    """A create whose outcome may be unknown (:func:`outcome_unknown`): its failure names the key and how to
    rerun it safely — the same key never creates a second one, and returns the first if it was created."""
    try:
        yield
    except ApiError as exc:
        if not outcome_unknown(exc):
            raise
        raise Failure(f"{exc}\nThe {noun} may have been created: rerun the same command with --idempotency-key {key} "
                      f"to retry without creating a second {noun}") from exc
