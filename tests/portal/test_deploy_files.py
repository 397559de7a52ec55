"""docker-compose.yml, Dockerfile and .env.example, checked statically (no Docker engine here)."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from portal.celery import app

REPO = Path(__file__).resolve().parents[2]
APP_SERVICES = ("web", "worker", "notify-worker", "beat", "migrate", "gateway")
LONG_RUNNING = ("web", "worker", "notify-worker", "beat", "gateway", "postgres", "redis")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def env_example_names() -> set[str]:
    text = (REPO / ".env.example").read_text()
    return set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", text, flags=re.MULTILINE))


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def test_it_defines_the_services(compose):
    services = compose["services"]
    assert set(services) >= {"web", "worker", "beat", "postgres", "redis", "migrate"}
    assert services["postgres"]["image"].split(":")[1].startswith("16")
    assert services["redis"]["image"].split(":")[1].startswith("7")
    assert services["web"]["command"][0] == "gunicorn"
    assert services["worker"]["command"][:4] == ["celery", "-A", "portal", "worker"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "portal", "beat"]
    assert services["migrate"]["command"][-2:] == ["migrate", "--noinput"]
    assert services["gateway"]["command"][:3] == ["python", "manage.py", "gateway"]
    # On the sandbox the engines listen on the worker's loopback: the gateway shares its network.
    assert services["gateway"]["network_mode"] == "service:worker"


def test_it_gives_every_long_running_service_a_healthcheck(compose):
    for name in LONG_RUNNING:
        check = compose["services"][name].get("healthcheck")
        assert check and check["test"][0] in {"CMD", "CMD-SHELL"}, name
        assert check.get("retries", 0) >= 3, name
    assert any("/healthz" in part for part in compose["services"]["web"]["healthcheck"]["test"])
    assert "pg_isready" in " ".join(compose["services"]["postgres"]["healthcheck"]["test"])
    assert "ping" in " ".join(compose["services"]["redis"]["healthcheck"]["test"])


def test_it_starts_the_app_only_when_its_services_are_ready(compose):
    services = compose["services"]
    for name in ("web", "worker", "beat"):
        assert services[name]["depends_on"] == {
            "postgres": {"condition": "service_healthy"},
            "redis": {"condition": "service_healthy"},
            "migrate": {"condition": "service_completed_successfully"},
        }, name
    assert services["migrate"]["depends_on"]["postgres"] == {"condition": "service_healthy"}
    assert services["migrate"]["restart"] == "no"


def test_it_keeps_state_in_named_volumes(compose):
    declared = set(compose["volumes"])
    used = {mount.split(":")[0] for service in compose["services"].values() for mount in service.get("volumes", [])}
    assert used <= declared
    assert any(m.endswith(":/var/lib/postgresql/data") for m in compose["services"]["postgres"]["volumes"])
    assert declared - used == set()


def test_it_points_the_app_at_postgres_and_redis(compose):
    for name in APP_SERVICES:
        env = compose["services"][name]["environment"]
        assert env["DEBUG"] == "false", name
        assert env["DATABASE_URL"].startswith("postgres://") and "@postgres:5432/" in env["DATABASE_URL"], name
        assert env["REDIS_URL"].startswith("redis://redis:6379/"), name
        assert env["SECRET_KEY"].startswith("${SECRET_KEY:?"), name  # never a default key
        assert env["SLIPWAY_SECRET_KEYS"].startswith("${SLIPWAY_SECRET_KEYS:?"), name  # secret env needs its own key


def test_it_documents_every_variable_the_compose_file_uses(compose, env_example_names):
    used = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", (REPO / "docker-compose.yml").read_text()))
    for name in APP_SERVICES:
        used |= set(compose["services"][name]["environment"])
    assert used - env_example_names == set()


def settings_read() -> set[str]:
    """Every variable portal/settings.py reads through the typed helpers of portal/env.py."""
    source = (REPO / "portal" / "settings.py").read_text()
    return set(re.findall(r'env_(?:str|bool|int|float|list|networks|choice|group_map|trusted_proxies)\(\s*"([A-Z0-9_]+)"',
                          source))


def test_it_documents_every_variable_the_settings_read(env_example_names):
    read = settings_read()
    assert len(read) > 20  # the scan itself works
    assert read - env_example_names == set()


#: Variables .env.example lists that the settings' helpers do not read, and the file that does.
READ_ELSEWHERE = {"POSTGRES_PASSWORD": "docker-compose.yml", "SLIPWAY_PORT": "docker-compose.yml",
                  "PORT": "scripts/run.sh", "PROMETHEUS_MULTIPROC_DIR": "portal/env.py",
                  "SLIPWAY_GATEWAY_PORT": "scripts/run.sh"}


def test_every_variable_it_lists_is_read(env_example_names):
    """A setting that exists only in the docs is a promise nothing keeps."""
    assert env_example_names - settings_read() - set(READ_ELSEWHERE) == set()
    assert [name for name, where in READ_ELSEWHERE.items() if name not in (REPO / where).read_text()] == []


def test_it_builds_a_non_root_image(dockerfile):
    users = [args for instruction, args in dockerfile if instruction == "USER"]
    assert users, "the image must switch to an unprivileged user"
    final_user = users[-1].split(":")[0]
    assert final_user not in {"root", "0"}
    froms = [args for instruction, args in dockerfile if instruction == "FROM"]
    assert froms[-1].startswith("python:3.11-slim")


def test_it_collects_static_files_and_vendors_htmx_at_build_time(dockerfile):
    runs = [args for instruction, args in dockerfile if instruction == "RUN"]
    assert any("collectstatic" in run and "--noinput" in run for run in runs)
    assert any('npm pack' in run and "htmx.org@" in run for run in runs)
    copies = [args for instruction, args in dockerfile if instruction == "COPY"]
    assert any(c.startswith("--from=htmx") and c.endswith("static/vendor/htmx.min.js") for c in copies)
    # collectstatic must run after the sources and htmx are in place.
    order = [i for i, (ins, args) in enumerate(dockerfile) if ins == "COPY" or "collectstatic" in args]
    assert "collectstatic" in dockerfile[order[-1]][1]


def test_the_packages_pyproject_installs_are_copied_before_pip_install(dockerfile):
    """``pip install .`` builds the packages setuptools names (the ``slipway`` command): they must be there."""
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    install = next(i for i, (ins, args) in enumerate(dockerfile) if ins == "RUN" and args.startswith("pip install"))
    copied = " ".join(args for ins, args in dockerfile[:install] if ins == "COPY")
    assert packages == ["slipway"]
    assert all(f"{package}/" in copied.split() for package in packages)


def test_it_runs_gunicorn_with_a_healthcheck(dockerfile):
    instructions = dict(dockerfile)
    assert shlex.split(instructions["CMD"].replace('"', "").strip("[]").replace(",", " "))[0] == "gunicorn"
    assert "/healthz" in instructions["HEALTHCHECK"]
    assert instructions["EXPOSE"] == "8000"


def test_it_keeps_local_state_out_of_the_build_context():
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines() if line.strip()}
    assert {".git", ".venv", ".env", "var"} <= ignored
    assert "README.md" not in ignored and "pyproject.toml" not in ignored  # pip install needs them


def _queues_after_q(command: list[str]) -> set[str]:
    return set(command[command.index("-Q") + 1].split(","))


def _workers(compose: dict) -> dict[str, list[list[str]]]:
    """Each way of running Slipway's ``celery worker`` commands: the compose file's, deploy/'s and ``make run``'s."""
    deployments = [doc for path in sorted((REPO / "deploy").glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())]
    return {
        "docker-compose.yml": [service["command"] for service in compose["services"].values()
                               if service.get("command", [])[:4] == ["celery", "-A", "portal", "worker"]],
        "deploy/": [container["command"] for doc in deployments if doc and doc.get("kind") == "Deployment"
                    for container in doc["spec"]["template"]["spec"]["containers"]
                    if container.get("command", [])[:4] == ["celery", "-A", "portal", "worker"]],
        "scripts/run.sh": [["celery", *shlex.split(line.rstrip("\\"))[1:]] for line in
                           (REPO / "scripts" / "run.sh").read_text().splitlines()
                           if "celery\" -A portal worker" in line],
    }


def test_every_queue_has_a_worker_and_notifications_have_workers_of_their_own(compose):
    """A queue no worker consumes holds its tasks for ever, so each way of running Slipway consumes all of the app's
    queues (portal/celery.py); and ``notify`` is a worker's only queue, so that a webhook that never answers holds a
    notification worker's thread, never a process the reconcile cycle or the canary rule needs
    (tests/notifications/test_notify_worker_e2e.py runs them so)."""
    queues = {queue.name for queue in app.conf.task_queues}
    for where, commands in _workers(compose).items():
        consumed = [_queues_after_q(command) for command in commands]
        assert set().union(*consumed) == queues, where
        assert {"notify"} in consumed and all("notify" not in got or got == {"notify"} for got in consumed), where
        # Two workers on one host need two node names (remote control, inspect): the notification worker names itself.
        [notify] = [command for command, got in zip(commands, consumed, strict=True) if got == {"notify"}]
        assert notify[notify.index("-n") + 1] == "notify@%h" and notify[notify.index("-P") + 1] == "threads", where
