"""How ``slipway`` waits between two polls of the API (``run --watch``, ``logs -f``, ``login``'s
wait for approval): a module of its own, since the run verbs and ``login`` share it, and the
verbs read ``polling.pause`` at each call, so a test that replaces it drives the cluster between polls.
"""

from __future__ import annotations

import time

#: Seconds between two polls of a followed run (its state, its log).
FOLLOW_INTERVAL = 2.0

#: Waiting between polls; one name, so a test can drive the cluster between polls.
pause = time.sleep
