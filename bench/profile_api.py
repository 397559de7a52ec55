"""Where an API request's time goes: queries, CPU and SQL per request, in-process, on PostgreSQL.

Run ``.venv/bin/python bench/profile_api.py [--requests 200]``. It seeds a scratch database as
``bench/api.py`` does (one team, its member's token, 200 runs), then sends each request kind of
the API benchmark through Django's full stack in this process (middleware, authentication,
view, serialisation; DEBUG off, the TLS proxy header set), one of each kind in turn, and prints per kind:

* wall time and CPU time per request (``time.process_time``: this process only, so what is
  left of the wall time is spent waiting — on PostgreSQL, Redis, the network), and the
  trivial endpoint's CPU time over this kind's (what the throughput ratios come close to);
* the number of SQL statements per request and the statements of one request;
* the top functions of a cProfile of the trivial endpoint, by own time.

The HTTP server, its worker threads and the 8 clients of ``bench/api.py`` are left out on
purpose: this is the per-request cost that the throughput ratios there are made of.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from admission import DEFAULT_URL, recreate_database, scratch_dir  # noqa: E402

REDIS = os.environ.get("SLIPWAY_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")


class StatementLog:
    """A database execute wrapper that keeps the statements of the requests it sees."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def __call__(self, execute, sql, params, many, context):
        self.statements.append(" ".join(sql.split()))
        return execute(sql, params, many, context)


def request_kinds(team_slug: str) -> dict:
    """The request kinds of ``bench/api.py``: label → ``(method, path, body maker)``."""
    run = {"team": team_slug, "image": "registry.example.com/ml/t:1", "command": ["python", "t.py"],
           "flavor": "a100-80gb"}
    endpoint = {"team": team_slug, "image": "registry.example.com/s/vllm:1", "flavor": "a100-1g.10gb"}
    return {
        "trivial (GET /flavors/)": ("get", "/api/v1/flavors/", None),
        "submit run": ("post", "/api/v1/runs/", lambda i: {**run, "name": f"p-{i}"}),
        "list runs": ("get", "/api/v1/runs/?page_size=50", None),
        "create endpoint": ("post", "/api/v1/endpoints/", lambda i: {**endpoint, "name": f"p-{i}"}),
        "list endpoints": ("get", "/api/v1/endpoints/?page_size=50", None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--profile", default="trivial (GET /flavors/)",
                        help="the request kind whose cProfile is printed (a label of the list above)")
    parser.add_argument("--sort", default="tottime", choices=["tottime", "cumulative"])
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url.startswith(("postgres://", "postgresql://")):
        base_url = DEFAULT_URL
    name = f"{base_url.rsplit('/', 1)[-1] or 'postgres'}_bench_profile"
    url = f"{base_url.rsplit('/', 1)[0]}/{name}"
    recreate_database(base_url, name)
    os.environ.update({"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "portal.settings", "DEBUG": "false",
                       "SECRET_KEY": "bench-only-not-a-secret-" + "x" * 40, "ALLOWED_HOSTS": "testserver",
                       "SLIPWAY_SECRET_KEYS": "YmVuY2gtb25seS1ub3QtYS1zZWNyZXQta2V5LTAwMDA=",
                       "SLIPWAY_VAR_DIR": str(scratch_dir("slipway-bench-profile-")), "REDIS_URL": REDIS})
    import django
    import redis

    redis.Redis.from_url(REDIS).flushdb()
    try:
        django.setup()
        from api import seed
        from django.core.management import call_command
        from django.db import connection
        from django.test import Client

        call_command("migrate", verbosity=0)
        token = seed(1)[0]
        client = Client(HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_X_FORWARDED_PROTO="https")
        print(f"{args.requests} sequential requests a kind, in-process, DEBUG off, PostgreSQL:")
        senders = {}
        for label, (method, path, body) in request_kinds("bench-0").items():
            send = getattr(client, method)

            def one(i: int, send=send, path=path, body=body) -> int:
                if body is None:
                    return send(path).status_code
                return send(path, body(i), content_type="application/json").status_code

            senders[label] = one
            one(-1)  # warm: first-request imports and caches are not the steady state
        # Round-robin, one request of each kind in turn: a shared VM's speed drifts within
        # seconds, and every kind then sees the same machine.
        logs = {label: StatementLog() for label in senders}
        wall, cpu = dict.fromkeys(senders, 0.0), dict.fromkeys(senders, 0.0)
        statuses = set()
        for i in range(args.requests):
            for label, one in senders.items():
                with connection.execute_wrapper(logs[label]):
                    began_wall, began_cpu = time.perf_counter(), time.process_time()
                    statuses.add((label, one(i)))
                    wall[label] += time.perf_counter() - began_wall
                    cpu[label] += time.process_time() - began_cpu
        failed = {(label, status) for label, status in statuses if status not in (200, 201)}
        assert not failed, f"HTTP errors: {sorted(failed)}"
        trivial = cpu["trivial (GET /flavors/)"]
        for label, log in logs.items():
            per_request = len(log.statements) / args.requests
            print(f"\n{label}: {wall[label] / args.requests * 1000:.2f} ms wall, "
                  f"{cpu[label] / args.requests * 1000:.2f} ms CPU (trivial / this: {trivial / cpu[label]:.2f}), "
                  f"{per_request:.1f} statements per request; one request's statements:")
            for statement in log.statements[-round(per_request):]:
                print(f"    {statement[:150]}")
        profile = cProfile.Profile()
        profile.enable()
        for i in range(args.requests):
            senders[args.profile](10_000 + i)
        profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(args.sort).print_stats(args.top)
        print(f"\n{args.profile}, top functions by {args.sort} time:")
        print("\n".join(line for line in out.getvalue().splitlines()[6:] if line.strip()))
    finally:
        from django.db import connections

        connections.close_all()
        recreate_database(base_url, name, drop_only=True)
        redis.Redis.from_url(REDIS).flushdb()


if __name__ == "__main__":
    main()
