"""Tandem settings: wiring only. Every value comes from the environment (see README)."""

import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from fleet.datadir import private_dir, private_sqlite, write_private
from fleet.env import env_bool, env_int, env_list, env_str
from fleet.runtime.embedded_redis import discover

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = private_dir(Path(env_str("TANDEM_DATA_DIR", str(BASE_DIR / "data"))).resolve())

DEBUG = env_bool("DEBUG", False)
PRODUCTION = env_bool("TANDEM_PRODUCTION", False)


def _secret_key() -> str:
    key = env_str("SECRET_KEY")
    if key:
        return key
    if PRODUCTION:
        raise ImproperlyConfigured("SECRET_KEY is required when TANDEM_PRODUCTION=1")
    # Local use: generate once, keep it in the data directory (never in the repository).
    path = DATA_DIR / "secret_key"
    if not path.exists():
        write_private(path, secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# A CSRF failure on an API path answers the API's JSON error, pages keep Django's page.
CSRF_FAILURE_VIEW = "fleet.guard.pages.csrf_failure"

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "axes",
    "fleet.audit",
    "fleet.accounts",
    "fleet.nodes",
    "fleet.pipelines",
    "fleet.telemetry",
    "fleet.planner",
    "fleet.console",
    "inference",
]

# Django's own, with their hooks on the event loop under ASGI where they cannot block
# (fleet/runtime/web_middleware.py): the stock ones cost a thread hop per hook and request.
MIDDLEWARE = [
    "fleet.runtime.web_middleware.SecurityMiddleware",
    "fleet.runtime.web_handler.AsyncWhiteNoiseMiddleware",  # WhiteNoise, without a thread hop
    "fleet.runtime.web_middleware.SessionMiddleware",
    "fleet.runtime.web_middleware.CommonMiddleware",
    "fleet.runtime.web_middleware.CsrfViewMiddleware",
    "fleet.runtime.web_middleware.AuthenticationMiddleware",
    "fleet.runtime.web_middleware.MessageMiddleware",
    "fleet.runtime.web_middleware.XFrameOptionsMiddleware",
    "fleet.runtime.web_middleware.CSPMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a lockout into its 429 page
]

ROOT_URLCONF = "fleet.urls"
ASGI_APPLICATION = "fleet.asgi.application"
WSGI_APPLICATION = None

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
                "fleet.accounts.context.role",
                "fleet.console.context.supervision",
                "fleet.console.context.nav",
            ],
        },
    },
]

# --- Database: SQLite (WAL) in the data directory unless DATABASE_URL is given -------------
_database_url = env_str("DATABASE_URL")
# Processes sharing one SQLite file (web, workers) wait for the write lock instead of failing
# with "database is locked": immediate transactions, a busy timeout, WAL.
_SQLITE_OPTIONS = {
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
}
if _database_url:
    try:
        DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=60)}
    except Exception as exc:  # dj_database_url raises several types for bad URLs
        raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from exc
    if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        DATABASES["default"]["OPTIONS"] = {
            **_SQLITE_OPTIONS,
            **DATABASES["default"].get("OPTIONS", {}),
        }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DATA_DIR / "tandem.sqlite3",
            "OPTIONS": dict(_SQLITE_OPTIONS),
            "CONN_MAX_AGE": 60,  # kept by the web's sync lanes (fleet/runtime/web_handler.py)
            # A file, not memory: tests with real worker processes share the test database.
            "TEST": {"NAME": str(DATA_DIR / "test.sqlite3")},
        }
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    private_sqlite(DATABASES["default"]["NAME"])  # 0600, and so its WAL and SHM
# Threads that run a web process's sync work (fleet/runtime/web_handler.py). SQLite: one, so writes
# queue in order instead of sleeping in its busy handler; a server database: a few.
WEB_SYNC_LANES = env_int(
    "TANDEM_WEB_SYNC_LANES",
    1 if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3" else 4,
    minimum=1,
)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: configured, or the embedded one started by `manage.py up` / the tests ----------
REDIS_URL = env_str("REDIS_URL") or discover(DATA_DIR) or ""


# channels_redis waits for a socket's messages with BZPOPMIN of 5 s; redis-py 8 reads with a
# 5 s socket timeout by default, so an idle websocket's wait raced that timeout and lost under
# load (TimeoutError: the server dropped the socket, 1006, every ~5 s of quiet). The read
# timeout must outlast the blocking command.
CHANNEL_LAYER_SOCKET_TIMEOUT_S = 30.0
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [
                {
                    "address": REDIS_URL or "redis://127.0.0.1:1/0",
                    "socket_timeout": CHANNEL_LAYER_SOCKET_TIMEOUT_S,
                }
            ],
            "capacity": 1000,
            "expiry": 10,
        },
    }
}

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- Celery: JSON only on the broker --------------------------------------------------------
CELERY_BROKER_URL = REDIS_URL or "redis://127.0.0.1:1/0"
CELERY_RESULT_BACKEND = CELERY_BROKER_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_RESULT_EXPIRES = 3600
# Tasks not routed elsewhere go to the control-plane worker that `manage.py up` starts.
CELERY_TASK_DEFAULT_QUEUE = "control"

# --- Auth ------------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Login throttling (django-axes, counted in the database): TANDEM_LOGIN_FAILURE_LIMIT wrong
# passwords for one username from one address lock that pair out for TANDEM_LOGIN_LOCKOUT_S
# (429 on /login/ and /admin/login/). API keys: fleet/accounts/key_throttle.py.
AUTHENTICATION_BACKENDS = [
    "fleet.accounts.backends.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("TANDEM_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("TANDEM_LOGIN_LOCKOUT_S", 900, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "fleet.accounts.backends.lockout_response"
AXES_VERBOSE = False
# Who reads every generation's prompt and output (owners always do; see accounts/access.py).
CONTENT_ROLE = env_str("TANDEM_CONTENT_ROLE", "admin")
if CONTENT_ROLE not in ("viewer", "operator", "admin"):
    raise ImproperlyConfigured(
        f"TANDEM_CONTENT_ROLE must be viewer, operator or admin, got {CONTENT_ROLE!r}"
    )
API_KEY_FAILURE_LIMIT = env_int("TANDEM_API_KEY_FAILURE_LIMIT", 20, minimum=1)
API_KEY_LOCKOUT_S = env_int("TANDEM_API_KEY_LOCKOUT_S", 300, minimum=1)
# A Bearer token Prometheus may scrape /metrics with (empty: loopback or a viewer's API key).
METRICS_TOKEN = env_str("TANDEM_METRICS_TOKEN", "")
# /metrics answers per-pipeline series (summed over each pipeline's nodes of a role) unless
# this is set or a scrape asks `?per_node=1`: one series per node is ~7 KB a node per scrape.
METRICS_PER_NODE = env_bool("TANDEM_METRICS_PER_NODE", False)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "fleet.accounts.authentication.ApiKeyAuthentication",
        "fleet.nodes.authentication.NodeTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["fleet.accounts.permissions.RolePermission"],
    # fleet.guard: one place where bad input stops (text, depth, size, integer ranges, page
    # sizes) and stored text always renders.
    "DEFAULT_PARSER_CLASSES": ["fleet.guard.rest.SafeJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "fleet.guard.rest.CappedLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["fleet.guard.rest.SafeJSONRenderer"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "EXCEPTION_HANDLER": "fleet.accounts.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Tandem admin API",
    "DESCRIPTION": "Control plane for speculative-decoding inference fleets.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "fleet.guard.schema.document_errors",  # the error statuses every view shares
        "inference.serving.openai_schema.document_openai",  # /v1 and the tokenizer paths
    ],
    # Nodes and generations both have a "state" field: name their enums apart.
    "ENUM_NAME_OVERRIDES": {
        "NodeStateEnum": "fleet.nodes.choices.NodeState",
        "GenerationStateEnum": "inference.models.GenerationState",
    },
}

# --- Security defaults outside DEBUG ---------------------------------------------------------
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", PRODUCTION)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", PRODUCTION)
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
# Content-Security-Policy on every response (django-csp): scripts, styles, images and
# sockets from this origin only; no inline script or style anywhere (templates use static
# files and json_script data blocks). Two hashes for Plotly's own <style> elements: the empty
# one it fills through the CSSOM (insertRule, which CSP allows), and the fixed MapLibre CSS it
# injects at load (its text, exactly; the browser test reports a change with a Plotly update).
_PLOTLY_STYLES = [
    "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='",
    "'sha256-ji27qzEtxXZW+7dun6UwjHXJ18e6WAin1VvNtkzIE/o='",
]
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", *_PLOTLY_STYLES],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
X_FRAME_OPTIONS = "DENY"
if PRODUCTION:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 3600, minimum=0)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
# The charting library is plotly.js's basic bundle (line and bar charts are all the console
# draws: a quarter of the full bundle), installed by `make` from npm (package.json) and served
# from node_modules, never copied into the repository: /static/vendor/plotly/plotly-basic.min.js
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("vendor/plotly", BASE_DIR / "node_modules" / "plotly.js-basic-dist-min"),
]
STATIC_ROOT = DATA_DIR / "staticfiles"
# collectstatic (`manage.py up`, the browser tests) writes a gzipped copy of each file beside
# it and WhiteNoise serves that to browsers that accept it: a live page's first load stays
# under 1 MB. No manifest (hashed names): pages rendered without collectstatic keep working.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# --- Tandem ----------------------------------------------------------------------------------
HEARTBEAT_PERIOD_S = env_int("TANDEM_HEARTBEAT_PERIOD_S", 5, minimum=1)
# Model directories a pipeline may name besides those inside DATA_DIR/models (absolute paths).
MODEL_PATHS = env_list("TANDEM_MODEL_PATHS", [])
HEARTBEAT_TOLERANCE = env_int("TANDEM_HEARTBEAT_TOLERANCE", 3, minimum=1)

# Periodic control-plane work, run by the control worker's embedded beat (`manage.py up`).
CELERY_BEAT_SCHEDULE = {
    "mark-lost-nodes": {"task": "tandem.nodes.mark_lost", "schedule": float(HEARTBEAT_PERIOD_S)},
    # node Redis users are in Redis's memory only: set again after a Redis restart
    "redis-acl-resync": {"task": "tandem.nodes.redis_acl_resync", "schedule": 2.0},
    # deadlines, and re-route (or fail) generations held by lost nodes
    "generations-watchdog": {"task": "tandem.generations.watchdog", "schedule": 1.0},
    # configuration pushes left in the outbox by a Redis outage, until delivered
    "config-push-outbox": {"task": "tandem.pipelines.deliver_pushes", "schedule": 2.0},
    # auto mode: the planner applies its recommendations (hysteresis and a minimum interval
    # per pipeline keep it from flapping; most passes change nothing)
    "planner-auto-mode": {"task": "tandem.planner.auto_mode", "schedule": 30.0},
    # every Apply is measured afterwards and rolled back when it lost (fleet.planner.verification)
    "planner-verify-applied": {"task": "tandem.planner.verify_applied", "schedule": 5.0},
    # learning from traffic: capture, purge, canary verdicts, rollback watch, next training
    "learning-tick": {"task": "tandem.learning.tick", "schedule": 5.0},
    # the alert conditions (compose/prometheus/alerts.yml) evaluated by Tandem itself: /alerts
    "evaluate-alerts": {"task": "tandem.telemetry.evaluate_alerts", "schedule": 5.0},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "daphne": {"level": "WARNING"},
        "django.channels.server": {"level": "WARNING"},
        "axes": {"level": "WARNING"},  # not a line per successful login
    },
}
