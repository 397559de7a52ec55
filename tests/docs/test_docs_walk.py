"""Every command and URL that README.md and docs/*.md show runs on the seeded demo (issue 34, item 8).

The pages are scanned (``tests/docs/scan.py``) and each thing a reader would type or open is
tried against the demo as ``manage.py seed_demo`` leaves it (on the demo's two sandbox clusters;
no worker, so work stays where admission put it):

* **URLs** on Slipway's own server — paths in code (``GET /api/v1/runs/{id}/``, ``/runs/new/``)
  and the demo's address in prose (<http://127.0.0.1:8000/>). A path counts when its first
  segment is one the server routes (:func:`routed_segments`); ``/etc/…`` is a file. In the API
  pages (:data:`API_PAGES`) a path outside ``/api/`` whose segment is the API's is relative to
  ``/api/v1/``, as those pages say. Placeholders take the demo's values (:func:`fill`);
  parameters listed without a value (``?team=&state=``) are left out. A GET is sent as alice
  and, refused, as the platform admin: one of them must get it (2xx, or a redirect that is not
  to a login page). Any other method is not sent (it would change the demo): its route must
  exist and take that method.
* **Commands** — inline code spans and shell blocks. ``slipway …`` runs through the command's
  Click app in-process against a live server, as alice (as tests/cli does); a ``console``
  block is a session run in order, with the files it shows (``$ cat bert.yaml``) and the ids
  it printed. ``manage.py …`` runs with ``call_command`` on the test database; ``python -m
  slipway`` and ``python -c`` in a subprocess. A ``sh`` block of ``curl`` calls runs whole in
  bash against the live server, as the platform admin (the API pages' blocks are staff's).

README's tour is walked too: its first step submits a run from the New run form as it says
(the image the form starts with kept, the command typed, the flavor and GPUs picked).

Anything else is listed in :data:`SKIPPED` (each with why) or :data:`NOT_COMMANDS`; a command
the walk does not know how to run fails it, so a page cannot grow a command nobody tries. Any
5xx, 404, refusal, traceback or non-zero exit fails it, naming the page and line.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
from click.testing import CliRunner
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connections
from django.test import Client
from django.urls import Resolver404, get_resolver, resolve

from inference.models import InferenceEndpoint
from jobs.models import TrainingRun
from portal.health import ProbeMiddleware
from reservations.models import Reservation
from slipway.cli import cli as slipway_cli
from sweeps.models import Sweep
from teams.services import create_api_token
from tests.docs import scan
from workspaces.models import Workspace

#: Pages whose paths are relative to /api/v1/ unless written under /api/ ("Base path /api/v1/").
API_PAGES = ("docs/api.md", "docs/api-walkthrough.md")

#: Commands and paths not run here, by regular expression (matched whole), and why. Each must
#: still match something on the pages (test_every_skip_still_names_something).
SKIPPED: dict[str, str] = {
    r"make .*": "make run serves until Ctrl-C, make install/test/bench install packages, run the whole suite or "
                "the benchmarks: CI runs them, and tests/portal/test_run_script.py and test_run_ctrl_c.py start "
                "make run's script",
    r"kubectl .*": "needs a Kubernetes cluster; tests/deploy checks the manifests it applies",
    r"slipway sweep watch \d+": "follows the sweep until it ends, and no worker moves the demo's here "
                                "(tests/cli/test_sweeps.py watches one to its end)",
    r"slipway login --url .*": "the browser sign-in waits for a person to approve the code in the portal "
                               "(tests/cli/test_login.py approves one)",
    r"slipway checkpoint --step .*": "runs inside a run's pods, with the run's own token (SLIPWAY_RUN_TOKEN) that "
                                     "only they get (tests/jobs/test_checkpoint_contract.py)",
    r"python train\.py .*": "the tour's training command: typed into the New run form, it runs in the run's pods",
    r"manage\.py sandbox reclaim-node": "the verb named in prose; docs/operations.md shows it with a node, which runs",
    r"POST /cohorts/": "the contract's example of a method a route does not take (a 405 for everyone)",
    r"/api/": "a prefix in prose (\"errors under /api/ are JSON\"), not an address",
    r"manage\.py workspace_proxy": "the sandbox's workspace proxy serves until stopped: make run starts it, and "
                                    "tests/workspaces/test_proxy.py starts the command and stops it",
    r"manage\.py serving_load( .*)?": "the load generator sends requests until stopped, to a gateway and key of the "
                                      "demo's: tests/inference/test_serving_load.py starts the command and stops it",
    r"(python )?manage\.py gateway(\s+--bind\s+\S+)?": "the gateway serves until stopped: make run starts it, and tests/gateway/test_gateway.py "
                            "starts the command (two of them) and stops it",
    r"(\.venv/bin/python )?manage\.py startkind .*": "writes a new kind's app and tests into the checkout and edits its "
                                                  "settings, URLs and docs: tests/workloads/test_startkind.py runs it "
                                                  "on a copy of the repository",
    r"/workspaces/auth/(\?workspace=.*)?": "the ingress controller's auth-url answers by a workspace's own cookie, "
                                           "which no reader of the portal holds (401): tests/workspaces/test_access.py",
    r"/reservations/feed/<token>\.ics": "a team's secret feed URL, made per team and shown once: "
                                         "tests/reservations/test_feed.py opens one",
    r"/accounts/oidc/slipway/login/callback/": "the identity provider's redirect target, answered only with a "
                                               "provider's code and state (tests/sso)",
}

#: Spans that begin like a command and are not one.
NOT_COMMANDS = {"slipway CLI on <client_name>": "the name a token from `slipway login` gets"}

#: The command and its verbs named in prose without their arguments: their --help shows that they exist.
#: ``slipway clusters`` is platform staff's and the walk's slipway is alice's (tests/cli/test_clusters.py runs it).
NAMED_VERBS = (".venv/bin/slipway", "slipway describe", "slipway login", "slipway reserve", "slipway clusters")

#: Commands shown with placeholders, as they run here (formatted with the demo's ids).
REWRITES = {
    "python manage.py create_api_token <username> [--expires-days N]":
        "python manage.py create_api_token alice --expires-days 30",
    "slipway checkpoint RUN_ID --step N --path P": "slipway checkpoint {checkpointed} --step 1000 --path /slipway/checkpoints/step-1000",
    "python manage.py sandbox load team-ml-research/ep-7 900": "python manage.py sandbox load team-ml-research/ep-{endpoint} 900",
    "slipway endpoint revisions 7": "slipway endpoint revisions {endpoint}",
    # -f follows until the run ends, and no worker moves it here: read what there is once.
    "slipway logs 27 -f --tail 3": "slipway logs 27 --tail 3",
    # A finished run of the demo's history with a training history (jobs.demo.DEMO_METRICS).
    "slipway metrics RUN --last 3": "slipway metrics {metrics} --last 3",
    "slipway metrics RUN": "slipway metrics {metrics}",
}

#: Where commands begin, in spans (a shell block's lines are all commands).
COMMAND_STARTS = ("slipway ", "python ", "manage.py ", ".venv/bin/", "make ", "kubectl ", "curl ", "docker ")

pytestmark = pytest.mark.django_db(transaction=True)


# -- what the pages show ---------------------------------------------------------------------------


def skip_reason(text: str, method: str = "") -> str | None:
    """Why ``text`` is not run (None: it is); a URL's pattern may name its method (``POST /cohorts/``)."""
    written = (text, f"{method} {text}") if method else (text,)
    return next((why for pattern, why in SKIPPED.items() if any(re.fullmatch(pattern, w) for w in written)), None)


def routed_segments(urlconf=None) -> set[str]:
    """First path segments the server answers: its URLconf's (through root-level includes) and the probes'."""
    segments = {path.strip("/").split("/")[0] for path in ProbeMiddleware.probes}

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern).lstrip("^")
            if hasattr(pattern, "url_patterns") and route == "":
                walk(pattern.url_patterns, route)
            else:
                segments.add(re.split(r"[/<(\\$]", route, maxsplit=1)[0])

    walk(get_resolver(urlconf).url_patterns, "")
    return segments


def server_path(mention: scan.Mention, portal: set[str], api: set[str]) -> str | None:
    """The path on the server a mention stands for, None when it is not one (a file, another host).

    Outside the API pages an API path must say ``/api/v1/``: ``PATCH /clusters/{name}/`` in a
    page about something else leaves the reader guessing (:data:`UNPREFIXED` marks it).
    """
    path = mention.text
    first = path.lstrip("/").split("/")[0].split("?")[0]
    if first in api and not path.startswith("/api/"):
        if mention.document in API_PAGES:
            return "/api/v1" + path
        if first not in portal or mention.method != "GET":
            return UNPREFIXED
    return path if first in portal else None


#: :func:`server_path`'s answer for an API path written without /api/v1/ outside the API pages.
UNPREFIXED = "unprefixed"


@dataclass
class Demo:
    """The demo's values for the pages' placeholders."""

    run: int
    endpoint: int
    workspace: int
    checkpointed: int
    metrics: int  #: a run with training metrics
    reservation: int  #: the demo's reservation (reservations.demo)
    sweep: int  #: the demo's sweep (sweeps.demo)


def fill(path: str, demo: Demo) -> str:
    """``path`` with its placeholders replaced by the demo's values and its value-less parameters dropped."""
    path = re.sub(r"/runs/(?:\{id\}|<id>)", f"/runs/{demo.run}", path)
    path = re.sub(r"/endpoints/(?:\{id\}|<id>)", f"/endpoints/{demo.endpoint}", path)
    path = re.sub(r"/workspaces/(?:\{id\}|<id>)", f"/workspaces/{demo.workspace}", path)
    path = re.sub(r"/reservations/(?:\{id\}|<id>)", f"/reservations/{demo.reservation}", path)
    path = re.sub(r"/sweeps/(?:\{id\}|<id>)", f"/sweeps/{demo.sweep}", path)
    path = re.sub(r"flavor=(&|$)", r"flavor=h100-80gb\1", path)  # a query's flavor placeholder: one the demo has
    path = re.sub(r"=<id>", f"={demo.run}", path)
    path = re.sub(r"\{slug\}|<slug>", "ml-research", path)
    path = path.replace("/cohorts/{name}", "/cohorts/research").replace("/clusters/{name}", "/clusters/east")
    path = path.replace("{flavor}", "a100-80gb")
    # A key of the demo's endpoint: only routes that change one name it (resolved, never sent).
    path = path.replace("{key_id}", "1")
    path = path.replace("/trials/{number}/", "/trials/1/")  # a sweep's trial: its first
    parts = urlsplit(path)
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if v])
    return parts.path + (f"?{query}" if query else "")


def takes(path: str, method: str) -> bool:
    """Whether a route answers ``method`` at ``path`` (without sending it)."""
    try:
        view = resolve(urlsplit(path).path).func
    except Resolver404:
        return False
    actions = getattr(view, "actions", None)  # a DRF viewset route: method → action
    if actions is not None:
        return method.lower() in actions
    cls = getattr(view, "view_class", None) or getattr(view, "cls", None)
    return cls is not None and callable(getattr(cls, method.lower(), None))


# -- the demo --------------------------------------------------------------------------------------


@pytest.fixture
def demo(settings, monkeypatch, published) -> Demo:
    """The seeded demo on its two sandbox clusters, as make run seeds it (publishes recorded, not run)."""
    settings.DEBUG = True  # seed_demo's guard against well-known passwords
    settings.SLIPWAY_SANDBOX_INVENTORY = str(django_settings.BASE_DIR / "sandbox" / "inventory.yaml")
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    # The live server's request threads close their connections, so the test database can be dropped.
    monkeypatch.setitem(connections.settings[DEFAULT_DB_ALIAS], "CONN_MAX_AGE", 0)
    call_command("seed_demo", stdout=io.StringIO())
    mine = TrainingRun.objects.filter(team__slug="ml-research").order_by("pk")
    return Demo(run=mine.first().pk,
                endpoint=InferenceEndpoint.objects.filter(team__slug="ml-research").order_by("pk").first().pk,
                workspace=Workspace.objects.filter(team__slug="ml-research").order_by("pk").first().pk,
                checkpointed=mine.filter(checkpoint__isnull=False).first().pk,
                metrics=mine.filter(name="bert-distill").first().pk,
                reservation=Reservation.objects.get(name="release-eval").pk,
                sweep=Sweep.objects.get(name="lr-search").pk)


def signed_in(username: str) -> tuple[str, Client]:
    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    return username, client


def refused(response) -> bool:
    if response.status_code in (401, 403, 404):
        return True
    return response.status_code in (301, 302) and "login/" in response.get("Location", "")


def walk_url(mention: scan.Mention, path: str, clients: list[tuple[str, Client]]) -> str | None:
    """What is wrong with opening ``path`` (None: nothing), as each of ``clients`` in turn until one gets it."""
    if mention.method != "GET":
        return None if takes(path, mention.method) else f"no route takes {mention.method}"
    answers = []
    for username, client in clients:
        response = client.get(path)
        if response.status_code >= 500:
            return f"{response.status_code} for {username}"
        if not refused(response):
            return None if response.status_code < 400 else f"{response.status_code}: {response.content[:200]!r}"
        answers.append(f"{response.status_code} for {username}")
    return ", ".join(answers)


# -- the walk --------------------------------------------------------------------------------------


@pytest.mark.django_db  # no live server here: the demo is rolled back, not flushed
def test_every_url_on_the_pages_answers(demo):
    portal, api = routed_segments(), routed_segments("portal.api_urls")
    clients = [signed_in("alice"), signed_in("admin")]
    failures, walked = [], set()
    for page in scan.documents():
        for mention in scan.urls(page):
            path = server_path(mention, portal, api)
            if path is None or skip_reason(mention.text, mention.method):
                continue
            if path == UNPREFIXED:
                failures.append(f"{mention.document}:{mention.line}: {mention.text}: an API path outside the API "
                                "pages: write it under /api/v1/")
                continue
            path = fill(path, demo)
            if "{" in path or "<" in path:
                failures.append(f"{mention.document}:{mention.line}: {mention.text}: a placeholder fill() does not know")
                continue
            if (mention.method, path) in walked:
                continue
            walked.add((mention.method, path))
            problem = walk_url(mention, path, clients)
            if problem:
                failures.append(f"{mention.document}:{mention.line}: {mention.method} {mention.text} ({path}): {problem}")
    assert ("GET", "/api/v1/") in walked and len(walked) > 40  # the scan itself works
    assert failures == []


@dataclass
class Walker:
    """Runs one command as a page shows it; ``failures`` collects what went wrong, by page and line."""

    demo: Demo
    env: dict[str, str]  # the slipway command's: the live server, alice's token
    admin_token: str
    failures: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)

    def fail(self, where: str, command: str, problem: str) -> None:
        self.failures.append(f"{where}: {command}: {problem}")

    def command(self, where: str, written: str, shown: str = "", ids: dict[str, str] | None = None) -> None:
        """``written`` as the page has it; in a console session, ``shown`` is what the page shows it printed
        and ``ids`` the session's ids so far (as shown → as printed here)."""
        if written in NOT_COMMANDS or skip_reason(written):
            return
        text = REWRITES.get(written, written).format(checkpointed=self.demo.checkpointed, endpoint=self.demo.endpoint,
                                                     metrics=self.demo.metrics)
        for shown_id, real_id in (ids or {}).items():
            text = re.sub(rf"\b{shown_id}\b", real_id, text)
        if text in NAMED_VERBS:
            text += " --help"
        words = scan.words(text)
        words[0] = words[0].removeprefix(".venv/bin/")
        if words[:2] == ["python", "manage.py"]:
            words = words[1:]
        self.ran.append(text)
        if words[0] == "slipway":
            self.slipway(where, text, words[1:], shown, ids)
        elif words[0] == "manage.py":
            self.manage(where, text, words[1:])
        elif words[:3] == ["python", "-m", "slipway"]:
            self.process(where, text, ["-m", "slipway", *(words[3:] or ["--help"])])
        elif words[:2] == ["python", "-c"]:
            self.process(where, text, words[1:])
        elif words[0] == "curl" and len(words) == 2:
            pass  # its URL is one the URL walk opens
        else:
            self.fail(where, written, "the walk does not know how to run this: run it here, or add it to SKIPPED with why")

    def slipway(self, where: str, text: str, args: list[str], shown: str, ids: dict[str, str] | None) -> None:
        token = self.env["SLIPWAY_TOKEN"]
        typed = f"{token}\n" if args[:2] == ["login", "--token"] else None  # the token it asks for
        result = CliRunner().invoke(slipway_cli, args, env=self.env, input=typed)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            self.fail(where, text, f"raised {result.exception!r}\n{result.output}")
        elif result.exit_code != 0:
            self.fail(where, text, f"exit {result.exit_code}\n{result.output}")
        shown_run, real_run = re.match(r"run (\d+) ", shown), re.match(r"run (\d+) ", result.output)
        if shown_run and real_run and ids is not None:
            ids[shown_run.group(1)] = real_run.group(1)

    def manage(self, where: str, text: str, args: list[str]) -> None:
        out = io.StringIO()
        try:
            call_command(*args, stdout=out, stderr=out)
        except Exception as exc:  # any error is the finding, reported with the command
            self.fail(where, text, f"{exc!r}\n{out.getvalue()}")

    def process(self, where: str, text: str, args: list[str]) -> None:
        result = subprocess.run([sys.executable, *args], cwd=django_settings.BASE_DIR, capture_output=True,
                                text=True, timeout=60, env={**os.environ, **self.env})
        if result.returncode != 0:
            self.fail(where, text, f"exit {result.returncode}\n{result.stdout}{result.stderr}")

    def session(self, block: scan.Block) -> None:
        """A console block in order: ``$ cat FILE`` writes the file as shown, then its commands run."""
        ids: dict[str, str] = {}
        for line, command, shown in scan.commands_in_block(block):
            words = scan.words(command)
            if words[0] == "cat" and len(words) == 2:
                with open(words[1], "w") as file:
                    file.write(shown)
                continue
            self.command(f"{block.document}:{line}", command, shown, ids)

    def script(self, block: scan.Block, url: str) -> None:
        """A block of curl calls, whole, in bash against ``url`` (for the pages' https://slipway.example.com)."""
        body = block.body.replace("https://slipway.example.com", url)
        result = subprocess.run(["bash", "-c", f"set -euxo pipefail\n{body}"], capture_output=True, text=True,
                                timeout=60, env={**os.environ, "SLIPWAY_TOKEN": self.admin_token})
        self.ran.append(f"{block.document}:{block.line} (bash)")
        if result.returncode != 0:
            self.fail(f"{block.document}:{block.line}", "the block", f"exit {result.returncode}\n{result.stderr}")


#: Pages whose shell blocks another test runs, and which.
BLOCKS_RUN_ELSEWHERE = {"docs/api-walkthrough.md": "tests/test_api_walkthrough.py runs its blocks verbatim on a "
                                                   "fresh demo and compares the answers it shows"}


def is_assignment(command: str) -> bool:
    """``NAME=value`` lines: settings a page shows (tests/docs/test_docs_pages.py checks them), not commands."""
    return all(re.match(r"[A-Z][A-Z0-9_]*=", word) for word in scan.words(command))


def test_every_command_on_the_pages_runs(demo, live_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the files a session writes
    users = get_user_model().objects
    _token, alice = create_api_token(users.get(username="alice"), "docs walk")
    _token, admin = create_api_token(users.get(username="admin"), "docs walk")
    walker = Walker(demo, {"SLIPWAY_URL": live_server.url, "SLIPWAY_TOKEN": alice,
                           "XDG_CONFIG_HOME": str(tmp_path / "config")}, admin)
    scripts = []
    for page in scan.documents():
        for mention in scan.commands_in_spans(page, COMMAND_STARTS):
            walker.command(f"{mention.document}:{mention.line}", mention.text)
        for block in scan.blocks(page):
            if block.language not in scan.SHELL or block.document in BLOCKS_RUN_ELSEWHERE:
                continue
            commands = [command for _line, command, _shown in scan.commands_in_block(block)]
            if any(scan.words(command)[0] == "curl" for command in commands):
                scripts.append(block)  # last: they change quotas and cohorts
            elif block.language == "console":
                walker.session(block)
            else:
                for line, command, _shown in scan.commands_in_block(block):
                    if not is_assignment(command):
                        walker.command(f"{block.document}:{line}", command)
    if shutil.which("curl") is None and os.environ.get("CI", "").lower() != "true":
        scripts = []  # a laptop without curl: CI has it and runs them
    for block in scripts:
        walker.script(block, live_server.url)
    print("\n".join(walker.ran))
    assert any(text.startswith("slipway run -f bert.yaml") for text in walker.ran)  # the scan itself works
    assert walker.failures == []


def tour_step(number: int) -> str:
    """Step ``number`` of README's "A five-minute tour", as written."""
    section = (scan.REPO / "README.md").read_text().split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    return re.search(rf"^{number}\. (.*?)(?=^\d+\. |\Z)", section, re.S | re.M).group(1)


@pytest.mark.django_db
def test_the_tours_first_run_is_submitted_as_the_tour_says(demo):
    """Step 1: name it, keep the image the form starts with, type the command, pick the flavor and the GPUs."""
    step = tour_step(1)
    image = re.search(r"`([\w.-]+/[\w./-]+:[\w.-]+)`", step).group(1)
    command = re.search(r"`(python [^`]+)`", step).group(1)
    flavor, gpus = re.search(r"flavor `([^`]+)` and (\d+) GPU", step).groups()
    _username, alice = signed_in("alice")
    response = alice.get("/runs/new/")
    form = response.context["form"]
    assert form["image"].value() == image  # the image the tour says the form starts with
    assert f'<option value="{flavor}">' in response.content.decode()  # offered, and not disabled
    data = {name: form[name].value() for name in form.fields if form[name].value() not in (None, False)}
    data.update(name="my-first-run", command=command, flavor=flavor, gpus_per_worker=gpus)
    response = alice.post("/runs/new/", data)
    assert response.status_code == 302, response.context["form"].errors
    run = TrainingRun.objects.get(name="my-first-run")
    assert (run.image, run.command, run.flavor.name, run.gpus_per_worker) == (image, command.split(), flavor, int(gpus))
