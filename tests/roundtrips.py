"""How many times the test's database connection waited for the server: round trips, not statements.

Statements are what ``django_assert_num_queries`` counts; under a lock what costs is each wait for an
answer. On PostgreSQL libpq's protocol trace (``PGconn.trace``) shows what the client sent: a simple
``Query`` message is a statement and its wait, and a ``Sync`` ends a batch of extended-protocol
statements (psycopg's pipeline mode sends several before one ``Sync``) whose answers come back
together. So the round trips are the ``Query`` and ``Sync`` messages sent — an upper bound: psycopg
sends a transaction's lazy ``BEGIN`` with a ``Sync`` of its own inside a pipeline without waiting for
it, so a test counts inside a transaction already begun. Elsewhere (SQLite, an in-process library)
each statement counts as one.
"""

from __future__ import annotations

import re
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import connection
from django.test.utils import CaptureQueriesContext


@dataclass
class RoundTrips:
    count: int = 0


#: A frontend message of libpq's trace that waits for the server: ``F <length> Query|Sync``.
_WAITS = re.compile(r"^F\s+\d+\s+(Query|Sync)\b", re.M)


@contextmanager
def round_trips():
    """Count the round trips of what runs inside: ``with round_trips() as trips: …; trips.count``."""
    trips = RoundTrips()
    if connection.vendor != "postgresql":
        with CaptureQueriesContext(connection) as ctx:
            yield trips
        trips.count = len(ctx.captured_queries)
        return
    from psycopg import pq

    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield trips
        finally:
            pgconn.untrace()
            trace.seek(0)
            trips.count = len(_WAITS.findall(trace.read()))
