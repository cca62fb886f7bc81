"""Django settings for Toolsync.

Configuration comes only from the environment (django-environ), one typed
default per setting. SQLite and a file-system broker are the embedded defaults
of `make run`; production and the test suite use PostgreSQL.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(environ.Env().str("TOOLSYNC_VAR_DIR", default=str(BASE_DIR / "var")))

env = environ.Env()


def _positive_float(name: str, default: float, *, allow_zero: bool = True) -> float:
    """Read a non-negative float setting; a bad value stops startup."""
    try:
        value = env.float(name, default=default)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number") from exc
    if value < 0 or (value == 0 and not allow_zero):
        raise ImproperlyConfigured(f"{name} must be {'>=' if allow_zero else '>'} 0")
    return value


def _positive_int(name: str, default: int) -> int:
    try:
        value = env.int(name, default=default)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer") from exc
    if value <= 0:
        raise ImproperlyConfigured(f"{name} must be > 0")
    return value


# ---------------------------------------------------------------------------
# Core
# ---------------------------------------------------------------------------

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "insecure-development-key-do-not-use-in-production"

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "django_filters",
    "drf_spectacular",
    "django_celery_beat",
    "gateways",
    "tools",
    "refresh",
    "skills",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"

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
            ],
        },
    },
]

# ---------------------------------------------------------------------------
# Database
# ---------------------------------------------------------------------------

DATABASE_URL = env.str("DATABASE_URL", default="")
if DATABASE_URL:
    DATABASES = {"default": env.db_url_config(DATABASE_URL)}
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(VAR_DIR / "toolsync.sqlite3"),
        }
    }

_db = DATABASES["default"]
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE takes the write lock at BEGIN, so two lease transactions
    # queue instead of both reading "free" and failing on the upgrade.
    _db.setdefault("OPTIONS", {}).update(
        {"transaction_mode": "IMMEDIATE", "timeout": 30}
    )
elif not DEBUG and _db["ENGINE"].endswith("postgresql") and not _db.get("PASSWORD"):
    if not env.bool("TOOLSYNC_ALLOW_PASSWORDLESS_DB", default=False):
        raise ImproperlyConfigured(
            "the database password is empty; set it in DATABASE_URL, or set "
            "TOOLSYNC_ALLOW_PASSWORDLESS_DB=1 for trust/peer authentication"
        )
_db.setdefault("CONN_MAX_AGE", env.int("DB_CONN_MAX_AGE", default=0))
_db.setdefault("ATOMIC_REQUESTS", False)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# ---------------------------------------------------------------------------
# Auth, i18n, static
# ---------------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# ---------------------------------------------------------------------------
# Celery
# ---------------------------------------------------------------------------

# The embedded default needs no broker server: kombu's file-system transport
# works across processes on one machine.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="filesystem://")
if CELERY_BROKER_URL == "filesystem://":
    _queue_dir = VAR_DIR / "broker"
    for _sub in ("out", "processed", "control"):
        (_queue_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir / "out"),
        "data_folder_out": str(_queue_dir / "out"),
        "processed_folder": str(_queue_dir / "processed"),
        # Exchange bindings (fanout for worker remote control); kombu's
        # default is a "control" directory in the current directory.
        "control_folder": str(_queue_dir / "control"),
        "store_processed": False,
        # kombu polls the folder once a second by default: most of the
        # notification -> applied latency of `make run`. A tenth is cheap.
        "polling_interval": 0.1,
    }
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"

# ---------------------------------------------------------------------------
# Toolsync
# ---------------------------------------------------------------------------

TOOLSYNC_TOOL_SEPARATOR = env.str("TOOLSYNC_TOOL_SEPARATOR", default="__")
TOOLSYNC_PROBE_MAX_PAGES = _positive_int("TOOLSYNC_PROBE_MAX_PAGES", 1000)
TOOLSYNC_PROBE_MAX_TOOLS = _positive_int("TOOLSYNC_PROBE_MAX_TOOLS", 50_000)
TOOLSYNC_PROBE_REQUEST_TIMEOUT = _positive_float(
    "TOOLSYNC_PROBE_REQUEST_TIMEOUT", 30.0, allow_zero=False
)
TOOLSYNC_PROBE_DEADLINE = _positive_float(
    "TOOLSYNC_PROBE_DEADLINE", 120.0, allow_zero=False
)
TOOLSYNC_MAX_DESCRIPTION_CHARS = _positive_int("TOOLSYNC_MAX_DESCRIPTION_CHARS", 65_536)
TOOLSYNC_MAX_SCHEMA_BYTES = _positive_int("TOOLSYNC_MAX_SCHEMA_BYTES", 262_144)
# A lease outlives the probe deadline plus apply, so a live worker never
# loses it; a crashed worker's lease expires and can be taken over.
TOOLSYNC_LEASE_SECONDS = _positive_float(
    "TOOLSYNC_LEASE_SECONDS", 300.0, allow_zero=False
)
if TOOLSYNC_LEASE_SECONDS <= TOOLSYNC_PROBE_DEADLINE:
    raise ImproperlyConfigured(
        "TOOLSYNC_LEASE_SECONDS must be longer than TOOLSYNC_PROBE_DEADLINE"
    )
TOOLSYNC_DEFAULT_REFRESH_INTERVAL = _positive_int(
    "TOOLSYNC_DEFAULT_REFRESH_INTERVAL", 300
)
TOOLSYNC_HEALTH_CHECK_INTERVAL = _positive_int("TOOLSYNC_HEALTH_CHECK_INTERVAL", 60)
TOOLSYNC_UNREACHABLE_AFTER = _positive_int("TOOLSYNC_UNREACHABLE_AFTER", 3)
TOOLSYNC_DEBOUNCE_SECONDS = _positive_float("TOOLSYNC_DEBOUNCE_SECONDS", 0.5)
TOOLSYNC_MAX_DELAY_SECONDS = _positive_float("TOOLSYNC_MAX_DELAY_SECONDS", 5.0)
# The notification listener (`manage.py listen`, docs/events.md): how often it
# re-reads the gateways, how often it proves each open session alive (a
# round trip; stream ends are noticed within a second without one), and its
# reconnect backoff (exponential with jitter, from INITIAL up to MAX).
TOOLSYNC_LISTENER_RELOAD_SECONDS = _positive_float(
    "TOOLSYNC_LISTENER_RELOAD_SECONDS", 2.0, allow_zero=False
)
# A round trip is sent only after this long without traffic on a session's
# streams. 60 s keeps 200 sessions under 2 % of a core even against servers
# that send no keep-alives (~1 % for the round trips, bench/bench_events.py);
# streams that end are noticed without any.
TOOLSYNC_LISTENER_PING_SECONDS = _positive_float(
    "TOOLSYNC_LISTENER_PING_SECONDS", 60.0, allow_zero=False
)
TOOLSYNC_LISTENER_PING_TIMEOUT = _positive_float(
    "TOOLSYNC_LISTENER_PING_TIMEOUT", 10.0, allow_zero=False
)
TOOLSYNC_LISTENER_BACKOFF_INITIAL = _positive_float(
    "TOOLSYNC_LISTENER_BACKOFF_INITIAL", 1.0, allow_zero=False
)
TOOLSYNC_LISTENER_BACKOFF_MAX = _positive_float(
    "TOOLSYNC_LISTENER_BACKOFF_MAX", 60.0, allow_zero=False
)
if TOOLSYNC_LISTENER_BACKOFF_MAX < TOOLSYNC_LISTENER_BACKOFF_INITIAL:
    raise ImproperlyConfigured(
        "TOOLSYNC_LISTENER_BACKOFF_MAX must be >= TOOLSYNC_LISTENER_BACKOFF_INITIAL"
    )
# Comma-separated Fernet keys; the first encrypts, all decrypt (rotation).
TOOLSYNC_ENCRYPTION_KEY = env.str("TOOLSYNC_ENCRYPTION_KEY", default="")
if not TOOLSYNC_ENCRYPTION_KEY and not DEBUG:
    raise ImproperlyConfigured("TOOLSYNC_ENCRYPTION_KEY must be set when DEBUG is off")
# Tests that need PostgreSQL fail instead of skipping when this is on (CI).
TOOLSYNC_REQUIRE_POSTGRES = env.bool("TOOLSYNC_REQUIRE_POSTGRES", default=False)

# Scheduling and health (SPEC 5.2, docs/scheduling.md). Beat enqueues one sweep
# every TOOLSYNC_SCHEDULE_SWEEP_SECONDS; a sweep enqueues what is due, in
# batches. A scheduled run still queued after TOOLSYNC_QUEUED_RUN_MAX_AGE
# seconds (lost message, no worker) is failed so the next tick replaces it.
TOOLSYNC_SCHEDULE_SWEEP_SECONDS = _positive_int("TOOLSYNC_SCHEDULE_SWEEP_SECONDS", 1)
TOOLSYNC_SCHEDULE_BATCH_SIZE = _positive_int("TOOLSYNC_SCHEDULE_BATCH_SIZE", 500)
TOOLSYNC_HEALTH_CHECK_TIMEOUT = _positive_float(
    "TOOLSYNC_HEALTH_CHECK_TIMEOUT", 10.0, allow_zero=False
)
TOOLSYNC_QUEUED_RUN_MAX_AGE = _positive_int("TOOLSYNC_QUEUED_RUN_MAX_AGE", 900)
# A worker machine's own /metrics exporter (0 = off); see docs/scale-out.md.
TOOLSYNC_WORKER_METRICS_PORT = env.int("TOOLSYNC_WORKER_METRICS_PORT", default=0)
TOOLSYNC_WORKER_METRICS_ADDR = env.str(
    "TOOLSYNC_WORKER_METRICS_ADDR", default="127.0.0.1"
)
# Soft limit: the probe's own deadline plus room to record the outcome; the
# hard limit kills a task that ignored it (its lease then simply expires).
CELERY_TASK_SOFT_TIME_LIMIT = int(TOOLSYNC_PROBE_DEADLINE) + 60
CELERY_TASK_TIME_LIMIT = CELERY_TASK_SOFT_TIME_LIMIT + 30

# ---------------------------------------------------------------------------
# Logging
# ---------------------------------------------------------------------------

LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # HTTP client libraries log request URLs; keep them quiet so nothing
        # that might carry credentials reaches the log at INFO.
        "httpx2": {"level": "WARNING"},
        "httpcore2": {"level": "WARNING"},
        "mcp": {"level": "WARNING"},
    },
}

# ---------------------------------------------------------------------------
# HTTP API (SPEC 6): DRF, knox tokens, the error envelope, OpenAPI
# ---------------------------------------------------------------------------

INSTALLED_APPS += ["drf_standardized_errors", "drf_spectacular_sidecar"]
REST_FRAMEWORK = {
    # Bearer first: its `WWW-Authenticate` makes anonymous calls answer 401.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "project.api.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_PAGINATION_CLASS": "project.api.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "project.api.schema.AutoSchema",
    "EXCEPTION_HANDLER": "drf_standardized_errors.handler.exception_handler",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
DRF_STANDARDIZED_ERRORS = {
    "EXCEPTION_HANDLER_CLASS": "project.api.errors.EnvelopeExceptionHandler",
    "EXCEPTION_FORMATTER_CLASS": "project.api.errors.EnvelopeFormatter",
    # 5xx answer the envelope in DEBUG too; the traceback still goes to the log.
    "ENABLE_IN_DEBUG_FOR_UNHANDLED_EXCEPTIONS": True,
}
# API tokens live this many days (0 = no expiry); `create_api_token --days`.
TOOLSYNC_API_TOKEN_TTL_DAYS = env.int("TOOLSYNC_API_TOKEN_TTL_DAYS", default=90)
if TOOLSYNC_API_TOKEN_TTL_DAYS < 0:
    raise ImproperlyConfigured("TOOLSYNC_API_TOKEN_TTL_DAYS must be >= 0")
REST_KNOX = {
    "AUTH_HEADER_PREFIX": "Bearer",
    # A recognisable prefix lets secret scanners spot leaked tokens.
    "TOKEN_PREFIX": "tsk_",
    "TOKEN_TTL": (
        timedelta(days=TOOLSYNC_API_TOKEN_TTL_DAYS)
        if TOOLSYNC_API_TOKEN_TTL_DAYS
        else None
    ),
    "AUTO_REFRESH": False,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Toolsync API",
    "DESCRIPTION": (
        "Keep a registry of remote MCP servers (gateways) and their tools in step "
        "with what each server really offers (SPEC 6). Authenticate with "
        "`Authorization: Bearer <token>` (`manage.py create_api_token`). Every "
        'failure answers `{"error": {"code", "message", "details"}}`; validation '
        "failures and unknown request fields answer 422 with field paths in "
        "`details.errors`. Another tenant's object answers 404."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "GatewayTransportEnum": "gateways.models.Gateway.Transport",
        "GatewayAuthTypeEnum": "gateways.models.Gateway.AuthType",
        "GatewayHealthEnum": "gateways.models.Gateway.Health",
        "RefreshTriggerEnum": "refresh.models.RefreshRun.Trigger",
        "RefreshStatusEnum": "refresh.models.RefreshRun.Status",
        "ToolReviewStateEnum": "tools.models.Tool.ReviewState",
        "ToolEffectEnum": "tools.models.Effect",
        "ToolVisibilityEnum": "tools.models.Tool.Visibility",
        "SkillStatusEnum": "skills.models.Skill.Status",
        "HealthOkEnum": ["ok"],
    },
}
