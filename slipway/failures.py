"""How a ``slipway`` verb fails: its exit codes (docs/api.md), one clean message with its code
(:class:`Failure`, never a traceback), and the API's refusals turned into those (:func:`refusals`).
"""

from __future__ import annotations

import contextlib

import click

from slipway.client import Ambiguous, ApiError, Forbidden, NotFound, NotSignedIn

# Exit codes (docs/api.md): 0 ok; 1 a watched workload failed (and what no other code names: another
# refusal of the API, an unreachable server); 2 a usage error — Click's own, a spec file that
# cannot be read, a spec the API refuses (400, or a dry run's "reject") —, so a script tells "my
# spec was wrong" from "my run failed"; 3 not signed in; 4 not found or forbidden.
EXIT_FAILED, EXIT_USAGE, EXIT_NOT_SIGNED_IN, EXIT_NOT_FOUND = 1, 2, 3, 4


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
