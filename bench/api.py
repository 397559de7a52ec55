"""The API under gunicorn on PostgreSQL, as in production: submit and list next to a trivial endpoint.

Run ``.venv/bin/python bench/api.py [--seconds 4] [--rounds 4] [--clients 8]``. It creates a scratch database
next to ``DATABASE_URL`` (or ``postgres://postgres@127.0.0.1:5432/test``), seeds a team with a
large quota per client, its member's token and 200 runs each (``--runs``), starts gunicorn with DEBUG off behind a TLS proxy
header (``X-Forwarded-Proto: https``, as an ingress sends), and drives it from ``--clients``
keep-alive HTTP clients on loopback (a team each), one phase per request kind, in the same run:

* trivial: ``GET /api/v1/flavors/`` — authenticated like the rest, one small query;
* submit: ``POST /api/v1/runs/`` (a fresh name each, admitted against the quota);
* list: ``GET /api/v1/runs/?page_size=50`` with 200+ runs in the caller's team;
* the same for endpoints: ``POST /api/v1/endpoints/`` and ``GET /api/v1/endpoints/``;
* submit and create again with every client a member of **one** team (its own token each), as a
  team's pipeline submitting in parallel does: their admissions serialise on that team's lock,
  which the phases above (a team per client) cannot see.

Each kind's phase follows a trivial phase of its own, in ``--rounds`` rounds (each starting one
kind later than the one before, so no kind always runs last); its ratio is its
rate over that trivial phase's, and the median of the rounds' ratios is judged against the
targets (submit ≥ 0.33, list ≥ 0.15; in one team submit ≥ 0.33, create ≥ 0.30). Prints the median requests per second, p50 and p99
latency of each kind, and each ratio with the rounds' own. Redis (its
own database, ``SLIPWAY_BENCH_REDIS_URL``) is the broker and cache, as in production; no worker
consumes the published tasks, and the database is flushed before and after. Gunicorn listens on
port 8171 (``SLIPWAY_BENCH_PORT``: another where other runs of the bench share the machine).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from admission import DEFAULT_URL, recreate_database, scratch_dir  # noqa: E402

PORT = int(os.environ.get("SLIPWAY_BENCH_PORT", "8171"))
RUNS_PER_TEAM = 200
#: A Redis database of its own: broker and cache as in production (publishing is part of a submit).
REDIS = os.environ.get("SLIPWAY_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
ONE_TEAM = "bench-one"
TARGETS = {"submit run": 0.33, "list runs": 0.15, "create endpoint": 0.33, "list endpoints": 0.15,
           "submit run (one team)": 0.33, "create endpoint (one team)": 0.30}


def scratch_url(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    name = f"{parts.path.lstrip('/') or 'postgres'}_bench_api"
    return urlunsplit(parts._replace(path=f"/{name}")), name


def percentile(values: list[float], share: float) -> float:
    """The ``share`` percentile (0..1) of ``values`` by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def seed(clients: int, runs: int = RUNS_PER_TEAM) -> list[str]:
    """A team per client (large quota and budget), its member's token, ``runs`` runs each; the raw tokens.

    One team per client as on a shared platform: admissions of one team serialise on its lock
    by design (bench/admission.py measures that case), different teams do not.
    """
    from decimal import Decimal

    from django.contrib.auth import get_user_model

    from jobs.services import submit_run
    from quotas.demo import seed_flavors, seed_team_quotas
    from teams.models import Membership, Role, Team
    from teams.services import create_api_token

    seed_flavors()
    raws = []
    for i in range(clients):
        team = Team.objects.create(slug=f"bench-{i}", name=f"Bench {i}", namespace=f"team-bench-{i}")
        seed_team_quotas(team, {"a100-80gb": 1_000_000, "a100-1g.10gb": 1_000_000}, Decimal("10000000"))
        user = get_user_model().objects.create_user(f"bench{i}")
        Membership.objects.create(user=user, team=team, role=Role.MEMBER)
        raws.append(create_api_token(user, "bench")[1])
        for n in range(runs):
            submit_run(user, team, {"name": f"seed-{n}", "image": "registry.example.com/ml/t:1",
                                    "command": ["python", "t.py"], "flavor": "a100-80gb"})
    return raws


def seed_one_team(clients: int, runs: int = RUNS_PER_TEAM) -> list[str]:
    """The team :data:`ONE_TEAM` (quota and runs as :func:`seed`'s) with a member and token per client; the raw tokens."""
    from decimal import Decimal

    from django.contrib.auth import get_user_model

    from jobs.services import submit_run
    from quotas.demo import seed_team_quotas
    from teams.models import Membership, Role, Team
    from teams.services import create_api_token

    team = Team.objects.create(slug=ONE_TEAM, name="Bench one", namespace=f"team-{ONE_TEAM}")
    seed_team_quotas(team, {"a100-80gb": 1_000_000, "a100-1g.10gb": 1_000_000}, Decimal("10000000"))
    raws = []
    for i in range(clients):
        user = get_user_model().objects.create_user(f"bench-one{i}")
        Membership.objects.create(user=user, team=team, role=Role.MEMBER)
        raws.append(create_api_token(user, "bench")[1])
    for n in range(runs):
        submit_run(user, team, {"name": f"seed-{n}", "image": "registry.example.com/ml/t:1",
                                "command": ["python", "t.py"], "flavor": "a100-80gb"})
    return raws


class Client:
    """One keep-alive HTTP connection with a bearer token."""

    def __init__(self, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
        self.headers = {"Authorization": f"Bearer {token}", "X-Forwarded-Proto": "https", "Host": "127.0.0.1",
                        "Content-Type": "application/json"}

    def request(self, method: str, path: str, body: dict | None = None) -> int:
        self.conn.request(method, path, json.dumps(body) if body is not None else None, self.headers)
        response = self.conn.getresponse()
        response.read()
        return response.status


#: Clock ticks per second of /proc/<pid>/stat's CPU times.
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(server_pid: int) -> dict[int, tuple[str, float]]:
    """``pid -> (side, CPU seconds so far)`` of gunicorn (``server_pid``, its workers: "app") and PostgreSQL ("db").

    Read from /proc (Linux): PostgreSQL is every process named ``postgres`` — its backends and
    the writers that flush what they wrote. Empty where there is no /proc.
    """
    used = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # gone since listed
        pid, rest = int(text.split(" ", 1)[0]), text.rsplit(")", 1)[1].split()
        name, ppid = text[text.index("(") + 1:text.rindex(")")], int(rest[1])
        side = "app" if server_pid in (pid, ppid) else "db" if name == "postgres" else None
        if side is not None:
            used[pid] = (side, (int(rest[11]) + int(rest[12])) / TICKS)  # utime + stime
    return used


def cpu_between(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds per side between two :func:`cpu_seconds` readings (a process that ended meanwhile is lost)."""
    spent = {"app": 0.0, "db": 0.0}
    for pid, (side, seconds) in after.items():
        spent[side] += seconds - before.get(pid, (side, 0.0))[1]
    return spent


class LockWaits:
    """While a phase runs, how many of the scratch database's backends wait for a lock, on average.

    Sampled from ``pg_stat_activity`` every 20 ms on a connection of its own. Submissions of one
    team queue on its admission lock (the team row), and this tells a phase held up there
    from one that is merely slow (several waiting at once: the lock; none: the work itself).
    """

    def __init__(self, url: str) -> None:
        self.url, self.samples, self.waiting = url, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample)

    def __enter__(self) -> LockWaits:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float:
        return self.waiting / self.samples if self.samples else 0.0

    def _sample(self) -> None:
        import psycopg

        name = urlsplit(self.url).path.lstrip("/")
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.wait(0.02):
                self.waiting += conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND "
                                             "wait_event_type = 'Lock'", (name,)).fetchone()[0]
                self.samples += 1


def phase(tokens: list[str], make_request, seconds: float, first: int = 0) -> tuple[float, list[float]]:
    """Requests per second and latencies (s) of ``make_request(client, worker, i)`` from every client.

    ``i`` counts each client's requests from ``first`` (names stay unique across phases).
    """
    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[int] = []
    deadline = time.perf_counter() + seconds

    def worker(index: int) -> None:
        client, i, mine = Client(tokens[index]), first, []
        while True:  # one request at least, however short the phase (the smoke test's are a few ms)
            began = time.perf_counter()
            status = make_request(client, index, i)
            mine.append(time.perf_counter() - began)
            if status >= 400:
                errors.append(status)
            i += 1
            if time.perf_counter() >= deadline:
                break
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(len(tokens))]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise SystemExit(f"{len(errors)} requests failed, e.g. HTTP {errors[0]}")
    return len(latencies) / (time.perf_counter() - started), latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of each kind's first phase not measured")
    parser.add_argument("--rounds", type=int, default=4, help="paired rounds, the kinds' order rotating; the median "
                                                              "ratio is judged")
    parser.add_argument("--runs", type=int, default=RUNS_PER_TEAM,
                        help="runs seeded per team (the lists read pages of 50 of them)")
    parser.add_argument("--kinds", default="", help="measure only these kinds (comma-separated labels, as printed)")
    args = parser.parse_args()
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url.startswith(("postgres://", "postgresql://")):
        base_url = DEFAULT_URL
    url, name = scratch_url(base_url)
    recreate_database(base_url, name)
    var_dir = str(scratch_dir("slipway-bench-api-"))
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "portal.settings", "DEBUG": "false",
           "SECRET_KEY": "bench-only-not-a-secret-" + "x" * 40, "ALLOWED_HOSTS": "127.0.0.1",
           "SLIPWAY_SECRET_KEYS": "YmVuY2gtb25seS1ub3QtYS1zZWNyZXQta2V5LTAwMDA=", "SLIPWAY_VAR_DIR": var_dir, "REDIS_URL": REDIS}
    os.environ.update(env)
    import redis

    redis.Redis.from_url(REDIS).flushdb()  # tasks published here are never consumed: start and end empty
    server = None
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        tokens, one_team = seed(args.clients, args.runs), seed_one_team(args.clients, args.runs)
        from django.db import connections

        connections.close_all()
        # 2 cores: 2 workers × 4 threads keeps both busy while PostgreSQL has its share.
        server = subprocess.Popen([str(Path(sys.executable).with_name("gunicorn")), "portal.wsgi", "-b",
                                   f"127.0.0.1:{PORT}", "--workers", "2", "--threads", "4", "--log-level", "warning"],
                                  cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(100):
            try:
                Client(tokens[0]).request("GET", "/api/v1/flavors/")
                break
            except OSError:
                time.sleep(0.1)
        def submit(team):
            return lambda c, w, i: c.request("POST", "/api/v1/runs/", {
                "team": team(w), "name": f"r-{w}-{i}", "image": "registry.example.com/ml/t:1",
                "command": ["python", "t.py"], "flavor": "a100-80gb"})

        def create(team):
            return lambda c, w, i: c.request("POST", "/api/v1/endpoints/", {
                "team": team(w), "name": f"e-{w}-{i}", "image": "registry.example.com/s/vllm:1",
                "flavor": "a100-1g.10gb"})

        def own(w):
            return f"bench-{w}"

        def shared(_w):
            return ONE_TEAM

        # label -> (the clients' tokens, the request of client w's i-th call)
        phases = {
            "trivial (GET /flavors/)": (tokens, lambda c, w, i: c.request("GET", "/api/v1/flavors/")),
            "submit run": (tokens, submit(own)),
            "list runs": (tokens, lambda c, w, i: c.request("GET", "/api/v1/runs/?page_size=50")),
            "create endpoint": (tokens, create(own)),
            "list endpoints": (tokens, lambda c, w, i: c.request("GET", "/api/v1/endpoints/?page_size=50")),
            "submit run (one team)": (one_team, submit(shared)),
            "create endpoint (one team)": (one_team, create(shared)),
        }
        trivial_label = "trivial (GET /flavors/)"
        if args.kinds:
            wanted = {label.strip() for label in args.kinds.split(",")}
            if wanted - set(phases):
                raise SystemExit(f"unknown kinds {sorted(wanted - set(phases))}; the kinds are {list(phases)[1:]}")
            phases = {label: phases[label] for label in phases if label == trivial_label or label in wanted}
        # Paired rounds: each kind is measured right after a trivial phase of its own, and its
        # ratio is taken against that pair's trivial rate. A shared VM's speed drifts by tens of
        # percent within a minute; a pair sees the same machine, and the median of the rounds'
        # ratios is what is judged.
        pairs = {label: [] for label in phases if label != trivial_label}
        latencies = {label: [] for label in phases}
        cpu = {label: {"app": 0.0, "db": 0.0} for label in phases}
        lock_waits = {label: [] for label in phases}
        first = 0
        kinds = list(pairs)
        warmed = set()
        for round_ in range(args.rounds):
            # Each round starts one kind later: what ran before a phase moves its figures (a kind
            # measured 0.03 lower in third place than in first), so every kind gets each place.
            shift = round_ % len(kinds)
            for label in kinds[shift:] + kinds[:shift]:
                for measured in (trivial_label, label):
                    if measured not in warmed:
                        warmed.add(measured)
                        # Warm up first (each worker process imports and compiles what the kind
                        # needs on its first requests): the figures are the steady state.
                        phase(*phases[measured], args.warmup, first=50_000_000 + first)
                    before = cpu_seconds(server.pid)
                    with LockWaits(url) as waits:
                        rate, seen = phase(*phases[measured], args.seconds, first=first)
                    lock_waits[measured].append(waits.mean)
                    spent = cpu_between(before, cpu_seconds(server.pid))
                    latencies[measured].extend(seen)
                    for side, seconds in spent.items():
                        cpu[measured][side] += seconds
                    first += 100_000  # request names stay unique across phases
                    if measured == trivial_label:
                        trivial_rate = rate
                pairs[label].append((rate, trivial_rate))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=20)
        from django.db import connections

        connections.close_all()
        recreate_database(base_url, name, drop_only=True)
        redis.Redis.from_url(REDIS).flushdb()
    print(f"gunicorn (2 workers × 4 threads, DEBUG off), PostgreSQL, {args.clients} keep-alive clients, "
          f"{args.rounds} rounds of {args.seconds:g} s phases, each kind paired with a trivial phase just before it:")
    trivial_rates = [trivial for measured in pairs.values() for _rate, trivial in measured]
    print(f"  {trivial_label:<26} {statistics.median(trivial_rates):7.1f} req/s   {spread(latencies[trivial_label])}"
          f"   (median of its {len(trivial_rates)} phases)")
    for label, measured in pairs.items():
        ratios = [rate / trivial for rate, trivial in measured]
        ratio, target = statistics.median(ratios), TARGETS[label]
        print(f"  {label:<26} {statistics.median(rate for rate, _ in measured):7.1f} req/s   {spread(latencies[label])}"
              f"   ratio {ratio:4.2f} (rounds {', '.join(f'{r:.2f}' for r in ratios)}; target ≥ {target}: "
              f"{'PASS' if ratio >= target else 'FAIL'})")
    print("CPU per request (gunicorn's processes; PostgreSQL's, its writers included — on a shared machine, other "
          "databases' too), and how many requests waited for a lock at a time, on average (LockWaits):")
    for label, used in cpu.items():
        count = len(latencies[label])
        print(f"  {label:<26} app {used['app'] / count * 1000:6.2f} ms   db {used['db'] / count * 1000:6.2f} ms"
              f"   waiting for a lock {statistics.mean(lock_waits[label]):4.2f}")


def spread(latencies: list[float]) -> str:
    return (f"p50 {statistics.median(latencies) * 1000:6.1f} ms   "
            f"p99 {percentile(latencies, 0.99) * 1000:6.1f} ms")

if __name__ == "__main__":
    main()
