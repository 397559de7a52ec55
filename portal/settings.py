"""Django settings for Slipway: one module, read from the environment.

Defaults run locally with no services at all: SQLite in WAL mode with IMMEDIATE
transactions (so concurrent writers serialize instead of failing), Celery on kombu's
filesystem transport under ``var/``, a database-backed cache, and the simulated GPU
cluster. Production sets ``DATABASE_URL`` (PostgreSQL), ``REDIS_URL`` (broker and cache),
``SECRET_KEY``, ``DEBUG=false``, ``ALLOWED_HOSTS`` and, for a real cluster,
``SLIPWAY_CLUSTER_BACKEND=kubernetes``. ``.env.example`` lists every variable.
"""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from portal.env import (
    derived_fernet_key,
    env_bool,
    env_choice,
    env_float,
    env_group_map,
    env_int,
    env_list,
    env_networks,
    env_str,
    env_trusted_proxies,
    export_multiproc_dir,
    parse_database_url,
    redis_cache,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("SLIPWAY_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

# 1. Core ------------------------------------------------------------------------------
DEBUG = env_bool("DEBUG", True)
# The local default key is only usable with DEBUG on; `check --deploy` flags it otherwise.
SECRET_KEY = env_str("SECRET_KEY", "django-insecure-local-development-key-change-me")
# Fernet keys encrypting secret env values at rest (workloads/crypto.py, docs/security.md): the
# first encrypts, every one decrypts, so a new key goes first and the old ones stay until
# `manage.py reseal_secret_env` has re-encrypted every value. Unset with DEBUG on (the demo): one
# key derived from SECRET_KEY. Unset with DEBUG off: none, and the portal refuses to start
# (system check slipway.E001, run by migrate and runserver) rather than tie the secrets to SECRET_KEY.
SLIPWAY_SECRET_KEYS = env_list("SLIPWAY_SECRET_KEYS", [derived_fernet_key(SECRET_KEY)] if DEBUG else [])
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "portal.apps.SlipwayAdminConfig",  # django.contrib.admin, its login throttled
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    # Single sign-on (OpenID Connect): only the provider's login and callback URLs are mounted, none
    # of allauth's own account pages (teams/oidc.py, docs/sso.md).
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    # Slipway's apps, bottom layer first (docs/design.md "Layers"; tests/test_layers.py holds the order).
    "core",
    "teams",
    "fleet",
    "billing",
    "quotas",
    "workloads",
    "jobs",
    "inference",
    "workspaces",
    "reservations",
    "sweeps",
    "notifications",
    "gateway",
    "front",
    "sandbox",
]

MIDDLEWARE = [
    # Outermost: under /api/ even DEBUG's technical error pages become the API's JSON shape.
    "portal.errors.ApiErrorMiddleware",
    # First: Kubernetes probes arrive with the pod IP as Host, which ALLOWED_HOSTS rightly
    # rejects, and over plain HTTP; they are answered before host and TLS checks run.
    "portal.health.ProbeMiddleware",
    # Before anything reads a body: an API body over the limit is a 413, not a logged traceback.
    "portal.errors.ApiBodyLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "portal.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Before anything looks a value up in the database (the session first).
    "portal.nulguard.NulGuardMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # allauth's per-request state (its system check requires it); inert without single sign-on.
    "allauth.account.middleware.AccountMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "teams.middleware.CurrentTeamMiddleware",
    # Every audit event written while serving a request records its client address.
    "teams.middleware.AuditAddressMiddleware",
    # Cache-Control: no-store on everything a signed-in user or token gets (docs/security.md).
    "teams.middleware.NoStoreWhenSignedInMiddleware",
    # Innermost: the portal's error pages with DEBUG on too (the demo), rendered with the user's team.
    "portal.errors.PortalErrorPagesMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "front.context_processors.slipway",
            ],
            # The portal's one way to show times and money ({{ x|when }}, {{ x|money }}).
            "builtins": ["core.templatetags.slipway"],
        },
    },
]

# 2. Database --------------------------------------------------------------------------
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'slipway.sqlite3'}")
_db = parse_database_url(DATABASE_URL)
if _db["ENGINE"].endswith("sqlite3"):
    _db["OPTIONS"] = {
        # IMMEDIATE takes the write lock at BEGIN, so two admissions serialize instead of
        # one failing with "database is locked" on upgrade; WAL lets readers go on.
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;",
    }
else:
    _db["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60)
    _db["CONN_HEALTH_CHECKS"] = True
# Lets parallel test sessions (or helpers) use distinct throw-away test databases.
if env_str("SLIPWAY_TEST_DB_NAME"):
    _db["TEST"] = {"NAME": env_str("SLIPWAY_TEST_DB_NAME")}
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# 3. Cache, broker, Celery -------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL", "")
if REDIS_URL:
    CACHES = {"default": redis_cache(REDIS_URL)}  # with bounded waits (portal.env.redis_cache)
else:
    # Shared by web, worker and beat (a per-process cache could not hold the reconcile lock).
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "slipway_cache"}}

# kombu ignores the host of the filesystem transport but warns when there is none.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL or "filesystem://localhost//")
CELERY_BROKER_DIR = VAR_DIR / "broker"
if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_BROKER_DIR / "queue"),
        "data_folder_out": str(CELERY_BROKER_DIR / "queue"),
        "processed_folder": str(CELERY_BROKER_DIR / "processed"),
        # Broadcast (remote control) messages; kombu's default is ./control in the CWD.
        "control_folder": str(CELERY_BROKER_DIR / "control"),
        "store_processed": False,
    }
    # The SQLite file and the filesystem broker need their folders; create them up front
    # so web, worker and beat can start in any order on a fresh checkout.
    for _folder in ("queue", "processed", "control"):
        (CELERY_BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
else:
    # Longer than the longest task (cluster calls time out well below this), so a slow
    # task is never handed to a second worker while the first is still on it.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600)}
CELERY_TASK_ALWAYS_EAGER = False  # only unit tests switch this on
CELERY_RECONCILE_INTERVAL = env_float("SLIPWAY_RECONCILE_INTERVAL", 5.0)
# The shortest life of a reconcile cycle's lock (workloads.tasks._single_flight): longer than the
# longest cycle, and how long a worker killed mid-cycle keeps the next cycles out.
SLIPWAY_RECONCILE_LOCK_SECONDS = env_int("SLIPWAY_RECONCILE_LOCK_SECONDS", 30)
CELERY_BEAT_SCHEDULE = {
    "reconcile": {
        "task": "workloads.tasks.reconcile",
        "schedule": CELERY_RECONCILE_INTERVAL,
        "options": {"queue": "reconcile", "expires": CELERY_RECONCILE_INTERVAL * 2},
    },
    # The demo's runs that seed_demo schedules for later (jobs.models.LaterDemoRun); a no-op without them.
    "later-demo-runs": {
        "task": "jobs.tasks.submit_later_demo_runs",
        "schedule": 10.0,
        "options": {"queue": "default", "expires": 20.0},
    },
}
# Notifications (docs/notifications.md): re-drive lost fan-outs and deliveries, note long waits.
SLIPWAY_NOTIFY_SWEEP_SECONDS = env_float("SLIPWAY_NOTIFY_SWEEP_SECONDS", 60.0)
CELERY_BEAT_SCHEDULE["notifications-sweep"] = {
    "task": "notifications.tasks.sweep", "schedule": SLIPWAY_NOTIFY_SWEEP_SECONDS,
    "options": {"queue": "default", "expires": SLIPWAY_NOTIFY_SWEEP_SECONDS * 2},
}
CELERY_BEAT_SCHEDULE["notifications-long-waits"] = {
    "task": "notifications.tasks.note_long_waits", "schedule": 60.0, "options": {"queue": "default", "expires": 120.0},
}
# Reservation windows 15 minutes before they start, and at their start (docs/reservations.md).
CELERY_BEAT_SCHEDULE["notifications-reservation-windows"] = {
    "task": "notifications.tasks.note_reservation_windows", "schedule": 60.0,
    "options": {"queue": "default", "expires": 120.0},
}
# Events (and their deliveries) older than this many days are deleted once done; 0 keeps them all.
SLIPWAY_NOTIFY_KEEP_DAYS = env_int("SLIPWAY_NOTIFY_KEEP_DAYS", 90)
CELERY_BEAT_SCHEDULE["notifications-prune"] = {
    "task": "notifications.tasks.prune", "schedule": 3600.0, "options": {"queue": "default", "expires": 3600.0},
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# 4. Auth, sessions, security ----------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# The only backend: every door that takes a password (portal, admin, any future one) goes
# through the sign-in throttle (portal/throttle.py, docs/security.md).
AUTHENTICATION_BACKENDS = ["teams.throttle.ThrottledModelBackend"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

# Single sign-on with OpenID Connect (docs/sso.md): on when the issuer and client id are set.
# The issuer exactly as the provider's discovery document states it; the groups claim may be a
# dotted path (realm_access.roles); the group map seeds staff's group mappings (teams.sso).
SLIPWAY_OIDC_ISSUER = env_str("SLIPWAY_OIDC_ISSUER", "")
SLIPWAY_OIDC_CLIENT_ID = env_str("SLIPWAY_OIDC_CLIENT_ID", "")
SLIPWAY_OIDC_CLIENT_SECRET = env_str("SLIPWAY_OIDC_CLIENT_SECRET", "")
SLIPWAY_OIDC_GROUPS_CLAIM = env_str("SLIPWAY_OIDC_GROUPS_CLAIM", "groups") or "groups"
SLIPWAY_OIDC_GROUP_MAP = env_group_map("SLIPWAY_OIDC_GROUP_MAP")
# The login page's button says "Sign in with <this>".
SLIPWAY_OIDC_NAME = env_str("SLIPWAY_OIDC_NAME", "single sign-on") or "single sign-on"
# Who may still sign in with a password: everyone (all) or platform staff only (staff, the
# break-glass door once everyone else signs in through the provider).
SLIPWAY_LOCAL_LOGIN = env_choice("SLIPWAY_LOCAL_LOGIN", "all", ("all", "staff"))
# Whom people are told to ask for a team (an address, a channel); empty: "a platform admin".
SLIPWAY_STAFF_CONTACT = env_str("SLIPWAY_STAFF_CONTACT", "")
if bool(SLIPWAY_OIDC_ISSUER) != bool(SLIPWAY_OIDC_CLIENT_ID):
    raise ImproperlyConfigured("Single sign-on needs both SLIPWAY_OIDC_ISSUER and SLIPWAY_OIDC_CLIENT_ID (or neither)")
# allauth: the provider app comes from the settings above (teams.oidc.SlipwaySocialAccountAdapter),
# every ID token's signature is checked (teams.oidc.SlipwayOpenIDConnectProvider), a first
# sign-in creates the user without a form, and the provider's e-mail is trusted as given.
SOCIALACCOUNT_ADAPTER = "front.sso.SlipwaySocialAccountAdapter"
SOCIALACCOUNT_PROVIDERS = {"openid_connect": {"provider_class": "teams.oidc.SlipwayOpenIDConnectProvider"}}
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
SOCIALACCOUNT_STORE_TOKENS = False
SOCIALACCOUNT_REQUESTS_TIMEOUT = 10
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_UNIQUE_EMAIL = False
ACCOUNT_LOGIN_ON_EMAIL_CONFIRMATION = False

SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
# Kubernetes probes hit these over plain HTTP inside the cluster.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("SECURE_PROXY_SSL", not DEBUG) else None
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
# A stale form gets the portal's styled 403 page (JSON under /api/), not Django's bare one.
CSRF_FAILURE_VIEW = "portal.errors.csrf_failure"
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
# Preloading is a near-irreversible promise for the whole domain, made by its owner (set
# SECURE_HSTS_PRELOAD=true); the deploy check's nag about it is silenced until then.
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
# quotas.UsageRecord's (team, start) index INCLUDEs cost, so PostgreSQL sums a team's month
# from the index alone. SQLite (the demo's and the tests' database) has no covering indexes and
# builds the plain (team, start) index instead, which is all it needs; its warning about the
# ignored column (models.W040) printed on every `make run` is silenced on SQLite only.
if _db["ENGINE"].endswith("sqlite3"):
    SILENCED_SYSTEM_CHECKS.append("models.W040")
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# 5. Static files, i18n ----------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
# Dates and times Django renders itself (the admin console's fields) in the portal's format.
FORMAT_MODULE_PATH = ["portal.formats"]
USE_TZ = True

# 6. REST framework --------------------------------------------------------------------
# The largest request body (Django's default, 2.5 MiB): a bigger one is a 413 under /api/
# (portal.errors.ApiBodyLimitMiddleware). A run or endpoint spec is a few kB.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("SLIPWAY_MAX_BODY_BYTES", 2_621_440)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "teams.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "core.pagination.StandardPagination",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.exceptions.api_exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON bodies only (docs/api.md): a form or multipart body is a 415, and the OpenAPI schema
    # advertises application/json alone (nested fields such as env have no form encoding).
    "DEFAULT_PARSER_CLASSES": ["core.parsers.SafeJSONParser"],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    # docs/api.md uses ?format=yaml / ?format=csv for alternative bodies handled by the views
    # themselves; DRF must not treat ?format= as renderer negotiation.
    "URL_FORMAT_OVERRIDE": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Slipway API",
    "DESCRIPTION": "Self-service GPU platform: training runs, inference endpoints, quotas and usage.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI from the sidecar package's static files: the docs work offline, no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "core.openapi.add_error_responses"],
    # One name for the one choice set of a rollout (a PATCH's ``rollout``, a rollout's ``strategy``).
    "ENUM_NAME_OVERRIDES": {"RolloutEnum": "inference.constants.Rollout",
                            # A sweep's and a trial's states (docs/sweeps.md): two vocabularies of fields named "state".
                            "SweepStateEnum": "sweeps.constants.SweepState",
                            "TrialStateEnum": "sweeps.constants.TrialState",
                            # A cluster's training API (docs/training.md): the effective, discovered and override fields.
                            "TrainingApiEnum": "cluster.training.TRAINING_APIS"},
}

# 7. Slipway ---------------------------------------------------------------------------
SLIPWAY_CLUSTER_BACKEND = env_str("SLIPWAY_CLUSTER_BACKEND", "sandbox")  # sandbox | kubernetes
# Several clusters (README "Several clusters"): clusters are data (fleet.Cluster); these are the rules.
SLIPWAY_CLUSTER_NAME = env_str("SLIPWAY_CLUSTER_NAME", "default")  # a single-cluster install's one cluster
SLIPWAY_CLUSTER_LOST_AFTER_CYCLES = env_int("SLIPWAY_CLUSTER_LOST_AFTER_CYCLES", 3)
SLIPWAY_PLACEMENT_TIMEOUT_SECONDS = env_int("SLIPWAY_PLACEMENT_TIMEOUT_SECONDS", 300)
SLIPWAY_LOST_REPLACE_AFTER_MINUTES = env_int("SLIPWAY_LOST_REPLACE_AFTER_MINUTES", 15)
# How often a cluster's heartbeat asks its training API again (docs/training.md).
SLIPWAY_TRAINING_DISCOVERY_SECONDS = env_int("SLIPWAY_TRAINING_DISCOVERY_SECONDS", 300)
# A failed provisioning's backoff on an atomic pool (docs/pools.md): the first wait, doubling each try, and its cap,
# in seconds — Kueue's retryStrategy (backoffBaseSeconds, backoffMaxSeconds) and its defaults.
SLIPWAY_PROVISIONING_BACKOFF_SECONDS = env_int("SLIPWAY_PROVISIONING_BACKOFF_SECONDS", 60)
SLIPWAY_PROVISIONING_BACKOFF_MAX_SECONDS = env_int("SLIPWAY_PROVISIONING_BACKOFF_MAX_SECONDS", 1800)
if not 1 <= SLIPWAY_PROVISIONING_BACKOFF_SECONDS <= SLIPWAY_PROVISIONING_BACKOFF_MAX_SECONDS <= 7 * 24 * 3600:
    raise ImproperlyConfigured(
        "SLIPWAY_PROVISIONING_BACKOFF_SECONDS must be at least 1 and at most SLIPWAY_PROVISIONING_BACKOFF_MAX_SECONDS, "
        f"itself at most a week (604800), got {SLIPWAY_PROVISIONING_BACKOFF_SECONDS} and "
        f"{SLIPWAY_PROVISIONING_BACKOFF_MAX_SECONDS}")
SLIPWAY_SANDBOX_INVENTORY = env_str("SLIPWAY_SANDBOX_INVENTORY", str(BASE_DIR / "sandbox" / "inventory.yaml"))
SLIPWAY_KUBECONFIG = env_str("KUBECONFIG", "")  # empty: in-cluster config, then ~/.kube/config
SLIPWAY_KUBE_QPS = env_float("SLIPWAY_KUBE_QPS", 20.0)
SLIPWAY_KUBE_BURST = env_int("SLIPWAY_KUBE_BURST", 40)
SLIPWAY_KUBE_TIMEOUT = env_float("SLIPWAY_KUBE_TIMEOUT", 10.0)
SLIPWAY_GANG_SCHEDULER = env_str("SLIPWAY_GANG_SCHEDULER", "")  # "" | volcano | scheduler-plugins
SLIPWAY_PROMETHEUS_URL = env_str("SLIPWAY_PROMETHEUS_URL", "http://prometheus-operated.monitoring.svc:9090")
# Optional second wall for user-written autoscale queries (docs/security.md): a label-enforcing
# proxy in front of Prometheus (deploy/prometheus-label-proxy.yaml) that the `prometheus` metric's
# triggers reach through each team's TriggerAuthentication; empty: they query SLIPWAY_PROMETHEUS_URL.
SLIPWAY_PROMETHEUS_PROXY_URL = env_str("SLIPWAY_PROMETHEUS_PROXY_URL", "")
# Serving (docs/serving.md): the gateway's public base URL, shown as each endpoint's `url`
# ({SLIPWAY_GATEWAY_URL}/{team}/{endpoint}); the namespace its pods run in on a real cluster, the only
# pods endpoint pods accept requests from; and the namespace of the Prometheus that scrapes the
# engines' /metrics (empty: none may).
SLIPWAY_GATEWAY_URL = env_str("SLIPWAY_GATEWAY_URL", "http://127.0.0.1:8002").rstrip("/")
SLIPWAY_GATEWAY_NAMESPACE = env_str("SLIPWAY_GATEWAY_NAMESPACE", "slipway-system")
SLIPWAY_ENDPOINT_SCRAPER_NAMESPACE = env_str("SLIPWAY_ENDPOINT_SCRAPER_NAMESPACE", "")
# Where the reconciler reads GPU telemetry (DCGM series: idle-GPU waste, charts); empty: not measured.
SLIPWAY_METRICS_URL = env_str("SLIPWAY_METRICS_URL", SLIPWAY_PROMETHEUS_URL)
# GPUs whose utilization stays under this percent are idle time; flagged after this many minutes.
SLIPWAY_IDLE_UTIL_PCT = env_float("SLIPWAY_IDLE_UTIL_PCT", 5.0)
SLIPWAY_IDLE_WINDOW_MINUTES = env_int("SLIPWAY_IDLE_WINDOW_MINUTES", 30)
# Fair share (docs/design.md "Sharing, preemption, clusters") remembers borrowed GPU-hours with this half-life: a team that borrowed
# all night yields in the morning.
SLIPWAY_FAIR_SHARE_HALF_LIFE_HOURS = env_float("SLIPWAY_FAIR_SHARE_HALF_LIFE_HOURS", 168.0)
# Seconds a preempted workload's pods get to stop (the delete's grace period).
SLIPWAY_PREEMPTION_GRACE_SECONDS = env_int("SLIPWAY_PREEMPTION_GRACE_SECONDS", 30)
# A reserved window's lead (docs/reservations.md "Before the window"): other teams' work still on its units
# this many minutes before it starts gets the preemption notice, and work whose runtime limit ends before
# then is placed there without being made preemptible.
SLIPWAY_RESERVATION_LEAD_MINUTES = env_int("SLIPWAY_RESERVATION_LEAD_MINUTES", 15)
# The checkpoint claim Slipway provides a run with the checkpoint contract and no volume of its
# own (run-42-checkpoints): its size, and its storage class (empty: the cluster's default; a
# PyTorchJob's claim is ReadWriteMany, so the class must offer that).
SLIPWAY_CHECKPOINT_STORAGE = env_str("SLIPWAY_CHECKPOINT_STORAGE", "100Gi")
SLIPWAY_CHECKPOINT_STORAGE_CLASS = env_str("SLIPWAY_CHECKPOINT_STORAGE_CLASS", "")
# Days a pruned trial's checkpoint claim is kept after it ended (docs/sweeps.md "Pruning"), for "continue trial".
SLIPWAY_PRUNED_CHECKPOINT_DAYS = env_int("SLIPWAY_PRUNED_CHECKPOINT_DAYS", 7)
# The portal's address as a run's pods reach it (e.g. http://slipway-web.slipway-system.svc): a
# run with the checkpoint contract reports its checkpoints to SLIPWAY_CHECKPOINT_URL under it.
# Empty: the pods get no such URL (they print the SLIPWAY_CHECKPOINT line instead).
SLIPWAY_POD_API_URL = env_str("SLIPWAY_POD_API_URL", "")
# Training metrics (jobs.metrics, docs/metrics.md). Every this many seconds the worker reads the
# new lines of each running run's log (Katib-style "name=value step=N" lines, SLIPWAY_PROGRESS):
# at most SLIPWAY_RUN_METRICS_READ_RUNS runs a cycle (those read longest ago first), at most
# SLIPWAY_RUN_METRICS_READ_LINES lines of each (the newest, when more were written since the last read).
SLIPWAY_RUN_METRICS_READ_SECONDS = env_float("SLIPWAY_RUN_METRICS_READ_SECONDS", 20.0)
SLIPWAY_RUN_METRICS_READ_RUNS = env_int("SLIPWAY_RUN_METRICS_READ_RUNS", 100)
SLIPWAY_RUN_METRICS_READ_LINES = env_int("SLIPWAY_RUN_METRICS_READ_LINES", 2000)
# Days the metric points of a finished run are kept (0: kept for ever).
SLIPWAY_RUN_METRICS_KEEP_DAYS = env_int("SLIPWAY_RUN_METRICS_KEEP_DAYS", 180)
# Most metric points one run stores (0: no bound): the API answers 409 past it, the log reader stops
# storing new steps (a point that replaces a stored one still counts once) (security review 5 #7).
SLIPWAY_RUN_METRICS_MAX_POINTS = env_int("SLIPWAY_RUN_METRICS_MAX_POINTS", 500_000)
# Most requests one run token makes a minute (metrics/ and checkpoints/ together; 0: no bound):
# past it, 429 with Retry-After until the minute ends (60: one report a second, 1,000 points each).
SLIPWAY_RUN_TOKEN_RATE = env_int("SLIPWAY_RUN_TOKEN_RATE", 60)
# Sweeps (docs/sweeps.md): every this many seconds the driver acts for each live sweep — tells its study what its
# trials reported, prunes through the checkpoint contract, launches the next trials.
SLIPWAY_SWEEP_SECONDS = env_float("SLIPWAY_SWEEP_SECONDS", 10.0)
CELERY_BEAT_SCHEDULE["sweeps-advance"] = {
    "task": "sweeps.tasks.advance_sweeps", "schedule": SLIPWAY_SWEEP_SECONDS,
    "options": {"queue": "default", "expires": SLIPWAY_SWEEP_SECONDS * 2},
}
CELERY_BEAT_SCHEDULE["metrics-read-logs"] = {
    "task": "jobs.tasks.read_run_logs", "schedule": SLIPWAY_RUN_METRICS_READ_SECONDS,
    "options": {"queue": "default", "expires": SLIPWAY_RUN_METRICS_READ_SECONDS * 2},
}
CELERY_BEAT_SCHEDULE["metrics-prune"] = {
    "task": "jobs.tasks.prune_run_metrics", "schedule": 3600.0, "options": {"queue": "default", "expires": 3600.0},
}
# GPU telemetry (workloads.telemetry.readings, docs/metrics.md "GPU telemetry"): the reconcile cycle keeps each
# workload's DCGM readings per minute for SLIPWAY_TELEMETRY_RAW_MINUTES; older minutes are folded into
# buckets of SLIPWAY_TELEMETRY_STEP_MINUTES (a divisor of a day) by a beat task every
# SLIPWAY_TELEMETRY_COMPACT_SECONDS, and everything older than SLIPWAY_TELEMETRY_KEEP_DAYS goes (0: kept for ever).
SLIPWAY_TELEMETRY_RAW_MINUTES = env_int("SLIPWAY_TELEMETRY_RAW_MINUTES", 60)
SLIPWAY_TELEMETRY_STEP_MINUTES = env_int("SLIPWAY_TELEMETRY_STEP_MINUTES", 10)
SLIPWAY_TELEMETRY_KEEP_DAYS = env_int("SLIPWAY_TELEMETRY_KEEP_DAYS", 90)
SLIPWAY_TELEMETRY_COMPACT_SECONDS = env_float("SLIPWAY_TELEMETRY_COMPACT_SECONDS", 300.0)
CELERY_BEAT_SCHEDULE["telemetry-compact"] = {
    "task": "workloads.tasks.compact_telemetry", "schedule": SLIPWAY_TELEMETRY_COMPACT_SECONDS,
    "options": {"queue": "default", "expires": SLIPWAY_TELEMETRY_COMPACT_SECONDS},
}
# Endpoint traffic (inference.traffic, docs/serving.md "Traffic metrics"): the gateways' 10-second windows are
# kept for SLIPWAY_TRAFFIC_RAW_MINUTES, then folded into minutes (counts and histograms summed) by a beat task
# as often as GPU telemetry's; rows older than SLIPWAY_TRAFFIC_KEEP_DAYS go (0: kept for ever; default: GPU
# telemetry's retention).
SLIPWAY_TRAFFIC_RAW_MINUTES = env_int("SLIPWAY_TRAFFIC_RAW_MINUTES", 120)
SLIPWAY_TRAFFIC_KEEP_DAYS = env_int("SLIPWAY_TRAFFIC_KEEP_DAYS", SLIPWAY_TELEMETRY_KEEP_DAYS)
CELERY_BEAT_SCHEDULE["traffic-compact"] = {
    "task": "inference.tasks.compact_traffic", "schedule": SLIPWAY_TELEMETRY_COMPACT_SECONDS,
    "options": {"queue": "default", "expires": SLIPWAY_TELEMETRY_COMPACT_SECONDS},
}
# Canary rollouts (inference.canary, docs/serving.md "Revisions, canary and rollback"): every
# SLIPWAY_CANARY_EVALUATE_SECONDS a beat task compares each candidate with its stable revision over the
# last two 30 s windows of the gateways' figures. A window is bad when the candidate's 5xx rate exceeds
# the stable's by more than SLIPWAY_CANARY_ERROR_DELTA (a fraction: 0.02 is 2 percentage points) or its
# p95 latency exceeds the stable's times SLIPWAY_CANARY_LATENCY_FACTOR; SLIPWAY_CANARY_BAD_WINDOWS
# consecutive bad windows roll it back. A window with fewer than SLIPWAY_CANARY_MIN_REQUESTS requests of
# either revision gives no verdict.
SLIPWAY_CANARY_ERROR_DELTA = env_float("SLIPWAY_CANARY_ERROR_DELTA", 0.02)
SLIPWAY_CANARY_LATENCY_FACTOR = env_float("SLIPWAY_CANARY_LATENCY_FACTOR", 1.5)
SLIPWAY_CANARY_BAD_WINDOWS = env_int("SLIPWAY_CANARY_BAD_WINDOWS", 2)
SLIPWAY_CANARY_MIN_REQUESTS = env_int("SLIPWAY_CANARY_MIN_REQUESTS", 20)
SLIPWAY_CANARY_EVALUATE_SECONDS = env_float("SLIPWAY_CANARY_EVALUATE_SECONDS", 2.0)
CELERY_BEAT_SCHEDULE["canary-evaluate"] = {
    "task": "inference.tasks.evaluate_canaries", "schedule": SLIPWAY_CANARY_EVALUATE_SECONDS,
    "options": {"queue": "default", "expires": SLIPWAY_CANARY_EVALUATE_SECONDS},
}
# Seconds a run's or an endpoint's image may fail to pull (ErrImagePull, ImagePullBackOff: the
# kubelet retries forever) before the run fails, or the endpoint with no ready replica fails, and
# their quota is released (docs/operations.md). 30 s is three pulls by the kubelet's back-off
# (at once, 10 s, 20 s later): a typo fails within a minute, not at the run's deadline. A
# malformed reference (InvalidImageName) fails at once.
SLIPWAY_IMAGE_PULL_TIMEOUT_SECONDS = env_int("SLIPWAY_IMAGE_PULL_TIMEOUT_SECONDS", 30)
SLIPWAY_RUN_AS_NON_ROOT = env_bool("SLIPWAY_RUN_AS_NON_ROOT", True)
# Registries images may come from, e.g. "ghcr.io,registry.example.com:5000,docker.io". Empty: any
# registry but loopback, link-local, private, metadata and cluster-internal hosts (docs/security.md).
# SLIPWAY_IMAGE_REGISTRIES is its former name, still read when the new one is not set.
SLIPWAY_ALLOWED_REGISTRIES = env_list("SLIPWAY_ALLOWED_REGISTRIES", env_list("SLIPWAY_IMAGE_REGISTRIES", []))
# The image the "New run" form starts with (README's tour keeps it). The default is a trainer the
# sandbox's registry holds (sandbox/inventory.yaml), so the demo's first run pulls; an install
# sets its own base training image. Empty: the field starts empty.
SLIPWAY_DEFAULT_RUN_IMAGE = env_str("SLIPWAY_DEFAULT_RUN_IMAGE", "registry.example.com/ml/trainer:2.4")
# The image the "New endpoint" form starts with (README's tour keeps it): a vLLM server the sandbox's
# registry holds, so the demo's first endpoint pulls and serves; an install sets its own. Empty: none.
SLIPWAY_DEFAULT_ENDPOINT_IMAGE = env_str("SLIPWAY_DEFAULT_ENDPOINT_IMAGE", "registry.example.com/serving/vllm:0.7")
SLIPWAY_NAMESPACE_PREFIX = env_str("SLIPWAY_NAMESPACE_PREFIX", "team-")
# Workspaces (docs/workspaces.md): the image a new one starts with (a JupyterLab image of Jupyter's
# docker-stacks), the longest idle window of a team whose policy staff did not set, how often its
# Jupyter server is asked about its activity (and how long it may take to answer), and whether a
# sandbox cluster's workspaces get a real local Jupyter server (the optional extra slipway[workspaces]).
SLIPWAY_WORKSPACE_IMAGE = env_str("SLIPWAY_WORKSPACE_IMAGE", "quay.io/jupyter/pytorch-notebook:cuda12-python-3.11")
SLIPWAY_WORKSPACE_MAX_IDLE_MINUTES = env_int("SLIPWAY_WORKSPACE_MAX_IDLE_MINUTES", 240)
SLIPWAY_WORKSPACE_ACTIVITY_SECONDS = env_float("SLIPWAY_WORKSPACE_ACTIVITY_SECONDS", 60.0)
SLIPWAY_WORKSPACE_ACTIVITY_TIMEOUT = env_float("SLIPWAY_WORKSPACE_ACTIVITY_TIMEOUT", 2.0)
SLIPWAY_WORKSPACE_LOCAL_SERVERS = env_bool("SLIPWAY_WORKSPACE_LOCAL_SERVERS", True)
# Whether a sandbox cluster's endpoint replicas run a real inference engine each, a local process
# (sandbox/engines.py, docs/serving.md): on by default; the test suite turns it on where it tests it.
SLIPWAY_SANDBOX_ENGINES = env_bool("SLIPWAY_SANDBOX_ENGINES", True)
# Run as root, the sandbox runs workspace N's local server as uid and gid BASE + N (workspaces/local.py):
# ids no account of the machine uses (above the usual ranges of users and of containers' subordinate ids).
SLIPWAY_WORKSPACE_LOCAL_UID_BASE = env_int("SLIPWAY_WORKSPACE_LOCAL_UID_BASE", 2_000_000_000)
# Workspaces are served on hosts of their own, never the portal's (docs/workspaces.md, "Who may open it";
# the system check slipway.E004 refuses the portal's host): on a real cluster ws-7.<SLIPWAY_WORKSPACE_HOST>
# (a wildcard DNS name and certificate), on the sandbox ws-7.localhost:<SLIPWAY_WORKSPACE_PROXY_PORT>, the
# port of the sandbox's workspace proxy (manage.py workspace_proxy, which make run starts on its port + 1).
# A workspace's cookie lasts SLIPWAY_WORKSPACE_COOKIE_SECONDS after its last use.
SLIPWAY_WORKSPACE_HOST = env_str("SLIPWAY_WORKSPACE_HOST", "notebooks.slipway.example.com")
SLIPWAY_WORKSPACE_PROXY_PORT = env_int("SLIPWAY_WORKSPACE_PROXY_PORT", 8001)
SLIPWAY_WORKSPACE_COOKIE_SECONDS = env_int("SLIPWAY_WORKSPACE_COOKIE_SECONDS", 3600)
# The gateway (manage.py gateway, docs/serving.md "The gateway"): the public base URL of endpoints
# (SLIPWAY_GATEWAY_URL/<team>/<endpoint>/…; make run starts one on the portal's port + 2), how long a request
# for an endpoint with no ready replica is held before 503, and its timeouts to the replicas (seconds to
# connect, and of silence while reading an answer).
SLIPWAY_GATEWAY_URL = env_str("SLIPWAY_GATEWAY_URL", f"http://127.0.0.1:{env_int('PORT', 8000) + 2}").rstrip("/")
SLIPWAY_GATEWAY_HOLD_SECONDS = env_float("SLIPWAY_GATEWAY_HOLD_SECONDS", 300.0)
SLIPWAY_GATEWAY_CONNECT_TIMEOUT = env_float("SLIPWAY_GATEWAY_CONNECT_TIMEOUT", 5.0)
SLIPWAY_GATEWAY_READ_TIMEOUT = env_float("SLIPWAY_GATEWAY_READ_TIMEOUT", 300.0)
# Seconds a write of an answer to its client may wait for the client to take it: past it the client, which stopped
# reading, is dropped (its replica's connection and slot freed), as one that hung up.
SLIPWAY_GATEWAY_WRITE_TIMEOUT = env_float("SLIPWAY_GATEWAY_WRITE_TIMEOUT", 60.0)
# Seconds a request's whole body may take to arrive (from when the gateway starts reading it): past it 408, the
# connection closed. A deadline on the whole body, not on the pause between bytes, which a client sending a byte at a
# time (a slowloris) never exceeds.
SLIPWAY_GATEWAY_BODY_TIMEOUT = env_float("SLIPWAY_GATEWAY_BODY_TIMEOUT", 60.0)
# The proxies in front of the gateway (addresses/networks; default none): only a request whose peer is one of them
# has its X-Forwarded-For/-Proto/-Host (and Forwarded, X-Forwarded-Port/-Prefix, X-Real-IP) believed and passed on
# to the replica; anyone else's are dropped, the gateway's own written in their place (a client writes what it likes).
SLIPWAY_GATEWAY_TRUSTED_PROXIES = env_networks("SLIPWAY_GATEWAY_TRUSTED_PROXIES", [])
# On a real cluster: the Ingresses' class, Slipway's /workspaces/auth/ as the ingress controller reaches
# it, the controller's namespace and Slipway's (the only two the workspace's NetworkPolicy admits), and the
# home volumes' storage class. A browser without the workspace's cookie is sent to the portal's Open, at
# SLIPWAY_PORTAL_URL.
SLIPWAY_WORKSPACE_INGRESS_CLASS = env_str("SLIPWAY_WORKSPACE_INGRESS_CLASS", "nginx")
SLIPWAY_WORKSPACE_AUTH_URL = env_str("SLIPWAY_WORKSPACE_AUTH_URL",
                                     "http://slipway-web.slipway-system.svc/workspaces/auth/")
SLIPWAY_WORKSPACE_INGRESS_NAMESPACE = env_str("SLIPWAY_WORKSPACE_INGRESS_NAMESPACE", "ingress-nginx")
SLIPWAY_WORKSPACE_PORTAL_NAMESPACE = env_str("SLIPWAY_WORKSPACE_PORTAL_NAMESPACE", "slipway-system")
SLIPWAY_WORKSPACE_STORAGE_CLASS = env_str("SLIPWAY_WORKSPACE_STORAGE_CLASS", "")
SLIPWAY_CURRENCY = env_str("SLIPWAY_CURRENCY", "USD")
# With DEBUG on, Django's technical error pages (tracebacks, URL lists) instead of the portal's.
SLIPWAY_TECHNICAL_ERROR_PAGES = env_bool("SLIPWAY_TECHNICAL_ERROR_PAGES", False)
SLIPWAY_IDEMPOTENCY_TTL_HOURS = env_int("SLIPWAY_IDEMPOTENCY_TTL_HOURS", 24)
# `slipway login` in a browser (teams.device, RFC 8628): how long its code lives, and how often
# the command line may poll for the token.
SLIPWAY_DEVICE_LOGIN_TTL_SECONDS = 600
SLIPWAY_DEVICE_LOGIN_INTERVAL_SECONDS = 5
# A token `slipway login` receives expires after this many days when the approving page sets no
# expiry (security review 4 #8: a device-issued token never expired).
SLIPWAY_DEVICE_TOKEN_DAYS = env_int("SLIPWAY_DEVICE_TOKEN_DAYS", 90)
# Reverse proxies in front of Slipway that append to X-Forwarded-For: a count (1 behind an
# ingress controller: the client is the entry that many places from the right) or their
# addresses/networks (X-Forwarded-For honoured only from them). The audit log and the sign-in
# throttle key on the client address (teams.services.client_ip, docs/security.md).
SLIPWAY_TRUSTED_PROXIES = env_trusted_proxies("SLIPWAY_TRUSTED_PROXIES")

# 8. Monitoring (README "Monitoring Slipway", docs/operations.md) ------------------------
# Where every process writes its Prometheus figures, summed by each scrape of /metrics. Exported
# into the environment here, before anything imports prometheus_client (core/metrics.py).
PROMETHEUS_MULTIPROC_DIR = export_multiproc_dir(VAR_DIR / "prometheus")
# Who may read /metrics: a request bearing this token (Authorization: Bearer …), from anywhere;
# without it, clients whose address is in SLIPWAY_METRICS_ALLOW (networks, CIDR). Anyone else: 403.
SLIPWAY_METRICS_TOKEN = env_str("SLIPWAY_METRICS_TOKEN", "")
SLIPWAY_METRICS_ALLOW = env_networks("SLIPWAY_METRICS_ALLOW", ["127.0.0.1/32", "::1/128"])
# A Celery worker serves its own processes' figures on this port (0: none). In Kubernetes each
# worker pod has its own figures directory; locally web and worker share var/ and the web's
# /metrics already holds them.
SLIPWAY_WORKER_METRICS_PORT = env_int("SLIPWAY_WORKER_METRICS_PORT", 0)
# Log lines as text (people) or one JSON object per line (log collectors): core/logformat.py.
SLIPWAY_LOG_FORMAT = env_choice("SLIPWAY_LOG_FORMAT", "text", ("text", "json"))

# 9. Notifications (docs/notifications.md) ---------------------------------------------
# Work queued longer than this many minutes is an event.
SLIPWAY_NOTIFY_QUEUED_MINUTES = env_int("SLIPWAY_NOTIFY_QUEUED_MINUTES", 30)
# Webhooks: seconds per request phase, attempts in all, and the first retry's delay (doubled after
# each failure, at most an hour). Loopback targets (127.0.0.1, localhost) only for tests and the
# demo: never in production, where any internal address is refused (notifications/targets.py).
SLIPWAY_WEBHOOK_TIMEOUT_SECONDS = env_float("SLIPWAY_WEBHOOK_TIMEOUT_SECONDS", 10.0)
SLIPWAY_WEBHOOK_MAX_ATTEMPTS = env_int("SLIPWAY_WEBHOOK_MAX_ATTEMPTS", 6)
SLIPWAY_WEBHOOK_BACKOFF_SECONDS = env_float("SLIPWAY_WEBHOOK_BACKOFF_SECONDS", 30.0)
SLIPWAY_WEBHOOK_ALLOW_LOOPBACK = env_bool("SLIPWAY_WEBHOOK_ALLOW_LOOPBACK", False)
# Sends in flight to one target at most (a webhook, or the mail server): a receiver that goes dead holds this many
# notification threads for a timeout, not the whole pool, before its first failure is recorded.
SLIPWAY_NOTIFY_MAX_IN_FLIGHT = env_int("SLIPWAY_NOTIFY_MAX_IN_FLIGHT", 2)
# Alerts on a workload's GPUs (docs/notifications.md "Alerts"): the platform's defaults, which a
# team may only tighten. An episode opens when its condition held for the minutes given, and
# closes once the condition stayed clear for SLIPWAY_ALERT_CLEAR_MINUTES (a shorter recovery keeps
# it open: one message per episode). Idle's threshold is the alert's, not idle waste's
# (SLIPWAY_IDLE_UTIL_PCT). deploy/prometheus/gpu-rules.yaml has the same defaults.
SLIPWAY_ALERT_IDLE_UTIL_PCT = env_float("SLIPWAY_ALERT_IDLE_UTIL_PCT", 10.0)
SLIPWAY_ALERT_IDLE_MINUTES = env_int("SLIPWAY_ALERT_IDLE_MINUTES", 30)
SLIPWAY_ALERT_MEMORY_PCT = env_float("SLIPWAY_ALERT_MEMORY_PCT", 95.0)
SLIPWAY_ALERT_MEMORY_MINUTES = env_int("SLIPWAY_ALERT_MEMORY_MINUTES", 5)
SLIPWAY_ALERT_TEMP_C = env_float("SLIPWAY_ALERT_TEMP_C", 85.0)
SLIPWAY_ALERT_TEMP_MINUTES = env_int("SLIPWAY_ALERT_TEMP_MINUTES", 5)
SLIPWAY_ALERT_CLEAR_MINUTES = env_int("SLIPWAY_ALERT_CLEAR_MINUTES", 10)
# The portal's address as people reach it, for the links in notifications (an alert's "cancel it").
# Unset, it follows the port the portal is served on (PORT: scripts/run.sh exports it and sets this
# to the address it prints), so `make run PORT=8110` links to :8110, not :8000.
SLIPWAY_PORTAL_URL = env_str("SLIPWAY_PORTAL_URL", f"http://localhost:{env_int('PORT', 8000)}")
# E-mail (Django's mail backends): the console backend prints messages (the demo); production
# sets django.core.mail.backends.smtp.EmailBackend and the EMAIL_HOST… variables.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
# Seconds an SMTP server has per step (connect, each reply). Django's default is none: a server that takes
# the connection and never answers would hold a notification thread for good (docs/notifications.md).
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 10.0)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "slipway@localhost")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"text": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
                   "json": {"()": "core.logformat.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": SLIPWAY_LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
