"""Django settings for the nettrail webapp, all read from environment variables.

Every variable is parsed by a strict helper in ``webapp/env.py`` (a bad value stops
start-up with a message naming it). The list of variables, their defaults and the
security model are documented in ``docs/webapp.md``: keep the two in sync.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from csp.constants import NONE, SELF

from webapp import datadir
from webapp.env import (
    env_bool,
    env_channel_layer,
    env_database,
    env_hosts,
    env_int,
    env_origins,
    env_secret_key,
    env_text,
)

DATA_DIR = datadir.ensure_data_dir(datadir.data_dir())
SECRET_KEY = env_secret_key("SECRET_KEY") or datadir.load_or_create_secret_key(DATA_DIR)
DEBUG = env_bool("NETTRAIL_DEBUG", False)
ALLOWED_HOSTS = env_hosts("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_origins("CSRF_TRUSTED_ORIGINS")

# Apps other engineers add (dashboard, read API, live websocket) join when present,
# so each can land without editing this file.
_OPTIONAL_APPS = ("webapp.dashboard", "webapp.api", "webapp.live", "webapp.reports", "webapp.metrics")
OPTIONAL_APPS = [name for name in _OPTIONAL_APPS if (Path(__file__).parent / name.split(".")[1] / "apps.py").exists()]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "axes",
    "webapp.traces",
    *OPTIONAL_APPS,
]

MIDDLEWARE = [
    # Outermost: times POST /api/ingest for the /metrics latency histogram.
    "webapp.metrics.middleware.IngestTimingMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files before anything that reads the session or the database.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # After auth: every view needs a logged-in user unless marked login_not_required.
    "webapp.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: answers a locked-out login with 429.
    "axes.middleware.AxesMiddleware",
]
# django-axes counts failed logins first and refuses any login (right password too)
# while locked out; ModelBackend then checks the password.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]

ROOT_URLCONF = "webapp.urls"
ASGI_APPLICATION = "webapp.asgi.application"
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

TEMPLATES: list[dict[str, Any]] = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).parent / "templates"],
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

# --- database: SQLite (WAL) in the data directory unless DATABASE_URL says otherwise ---
DATABASES = {"default": env_database("DATABASE_URL", str(DATA_DIR / datadir.DB_FILE))}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        # WAL: readers (dashboard, websocket) never block the ingest writer, and the
        # writer never blocks readers. synchronous=NORMAL is durable in WAL mode except
        # for the last transactions on power loss, which the collector's spool resends.
        # cache_size: 32 MiB of page cache per connection (default 2 MiB) keeps the
        # conn_uuid indexes' randomly placed inserts off the disk during bulk ingest.
        # page_size (only takes effect when the database is created, before WAL): 16 KiB
        # pages hold ~50-column rows and index runs with fewer page splits and writes;
        # mmap_size: reads of the (up to 1 GiB) hot part of the file skip the read()
        # copies. Together ~10 % less CPU per ingested record (docs/benchmarks.md).
        "init_command": (
            "PRAGMA page_size=16384; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
            "PRAGMA cache_size=-32768; PRAGMA mmap_size=1073741824;"
        ),
        # IMMEDIATE: take the write lock at BEGIN, so concurrent writers queue on the
        # busy timeout instead of failing with "database is locked" mid-transaction.
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- scale-out (docs/scale-out.md): REDIS_URL turns on the ingest bus (webapp/bus) ---
# With it, /api/ingest appends batches to a Redis stream and `nettrail writer`
# processes store them; live pushes then go through channels_redis on the same
# Redis unless CHANNEL_LAYER says otherwise.
NETTRAIL_REDIS_URL = env_text("REDIS_URL", "") or None
CHANNEL_LAYERS = {"default": env_channel_layer("CHANNEL_LAYER")}
if NETTRAIL_REDIS_URL is not None and not env_text("CHANNEL_LAYER", ""):
    CHANNEL_LAYERS = {"default": env_channel_layer("CHANNEL_LAYER", {"CHANNEL_LAYER": NETTRAIL_REDIS_URL})}

# --- nettrail ---
NETTRAIL_INGEST_MAX_BYTES = env_int("NETTRAIL_INGEST_MAX_BYTES", 16 * 1024 * 1024, minimum=1024)
# Largest body of any other request (login and other forms, dashboard actions); the
# capture upload has its own limit. webapp/gate.py refuses more before reading it.
NETTRAIL_REQUEST_MAX_BYTES = env_int("NETTRAIL_REQUEST_MAX_BYTES", 1024 * 1024, minimum=1024)
NETTRAIL_RETENTION_DAYS = env_int("NETTRAIL_RETENTION_DAYS", 30)  # 0: keep forever
NETTRAIL_RETENTION_ROWS = env_int("NETTRAIL_RETENTION_ROWS", 5_000_000)  # per table; 0: no limit
NETTRAIL_TRIM_INTERVAL = env_int("NETTRAIL_TRIM_INTERVAL", 300)  # seconds between trims; 0: never
NETTRAIL_TRIM_BATCH = env_int("NETTRAIL_TRIM_BATCH", 2000, minimum=1)  # rows per delete transaction
# Seconds between the server's background WAL checkpoints (SQLite; 0: requests checkpoint
# as SQLite does by default). webapp/traces/checkpoint.py.
NETTRAIL_CHECKPOINT_INTERVAL = env_int("NETTRAIL_CHECKPOINT_INTERVAL", 1)
# Live websocket flow control (webapp/traces/consumers.py, docs/api.md): unacknowledged
# messages and bytes per client, records and bytes buffered per client, seconds an
# overflowed client may stay silent, open live sockets per user (per server process).
NETTRAIL_LIVE_WINDOW = env_int("NETTRAIL_LIVE_WINDOW", 4, minimum=1)
NETTRAIL_LIVE_WINDOW_BYTES = env_int("NETTRAIL_LIVE_WINDOW_BYTES", 4 << 20, minimum=64 << 10)
NETTRAIL_LIVE_MAX_BUFFER = env_int("NETTRAIL_LIVE_MAX_BUFFER", 50_000, minimum=1000)
NETTRAIL_LIVE_MAX_BUFFER_BYTES = env_int("NETTRAIL_LIVE_MAX_BUFFER_BYTES", 16 << 20, minimum=64 << 10)
NETTRAIL_LIVE_STALL_SECONDS = env_int("NETTRAIL_LIVE_STALL_SECONDS", 30, minimum=1)
NETTRAIL_LIVE_SOCKETS_PER_USER = env_int("NETTRAIL_LIVE_SOCKETS_PER_USER", 20, minimum=1)

# --- security: everything below passes `check --deploy` except the HTTPS-only items,
# which NETTRAIL_HTTPS=1 turns on when a TLS proxy is in front (docs/webapp.md).
NETTRAIL_HTTPS = env_bool("NETTRAIL_HTTPS", False)
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_SECURE = NETTRAIL_HTTPS
CSRF_COOKIE_SECURE = NETTRAIL_HTTPS
SECURE_SSL_REDIRECT = NETTRAIL_HTTPS
SECURE_HSTS_SECONDS = 31_536_000 if NETTRAIL_HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = NETTRAIL_HTTPS
SECURE_HSTS_PRELOAD = NETTRAIL_HTTPS  # only takes effect once the domain is submitted to the list
if NETTRAIL_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    # __Host- cookies are only accepted by browsers when Secure, path=/ and host-only:
    # another subdomain or a plain-HTTP page cannot set or overwrite them.
    SESSION_COOKIE_NAME = "__Host-sessionid"
    CSRF_COOKIE_NAME = "__Host-csrftoken"

# Login throttling (django-axes, docs/webapp.md): each entry of AXES_LOCKOUT_PARAMETERS
# is counted on its own and any one locks. NETTRAIL_LOGIN_FAILURES wrong passwords for
# one user name, from any addresses, lock that name out; as many from one address, for
# any names, lock that address out (a per-(name, address) count gave every loopback alias
# and IPv6 address fresh tries). Failures are forgotten NETTRAIL_LOGIN_LOCKOUT_MINUTES
# after the last one; tries while locked out count as failures.
AXES_FAILURE_LIMIT = env_int("NETTRAIL_LOGIN_FAILURES", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("NETTRAIL_LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username"], ["ip_address"]]
# No reset on success: axes would clear every failure of the login's name *or address*,
# so anyone with an account could log in between guesses at another's password.
AXES_RESET_ON_SUCCESS = False
AXES_VERBOSE = False

# Content-Security-Policy (django-csp): scripts, styles and connections (fetch and the
# live websocket) only from this origin, no inline script or style, no plugins, no framing.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
# WhiteNoise serves the apps' static directories itself (indexed once at start-up):
# `nettrail up` runs daphne alone, with no collectstatic step and no web server in front.
# No STATIC_ROOT: nothing is collected (WhiteNoise would warn about the missing directory).
STATIC_ROOT = None
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = False

LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "INFO"},
    # Request bodies and headers (tokens, passwords) are never logged: django.request
    # logs only the path and status of failed requests.
    # axes: failures and lockouts (WARNING) are logged, not every successful login (INFO).
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}

# Alert e-mail (webapp/traces/alert_mail.py mails to NETTRAIL_ALERT_EMAILS): Django's
# SMTP backend, configured from the environment like everything else here.
EMAIL_HOST = env_text("NETTRAIL_EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("NETTRAIL_EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_text("NETTRAIL_EMAIL_USER", "")
EMAIL_HOST_PASSWORD = env_text("NETTRAIL_EMAIL_PASSWORD", "")
EMAIL_USE_TLS = env_bool("NETTRAIL_EMAIL_TLS", False)
DEFAULT_FROM_EMAIL = env_text("NETTRAIL_EMAIL_FROM", "nettrail@localhost")
EMAIL_TIMEOUT = 30  # seconds: a dead mail server stalls only the mail thread, and not for ever
