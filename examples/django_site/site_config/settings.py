"""Settings of the example site: SQLite by default; `SITE_DATABASE_URL`
(`postgresql://user@host:port/name`, `mysql://...`) names another database (the tests
use it for PostgreSQL)."""

import os
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "site_config.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "cronjobs.contrib.django",
    "demo",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]

_url = os.environ.get("SITE_DATABASE_URL")
if _url:
    _parts = urlsplit(_url)
    _engine = "postgresql" if _parts.scheme.startswith("postgres") else "mysql"
    DATABASES = {"default": {
        "ENGINE": f"django.db.backends.{_engine}", "NAME": _parts.path.lstrip("/"),
        "USER": _parts.username or "", "PASSWORD": _parts.password or "",
        "HOST": _parts.hostname or "", "PORT": str(_parts.port or ""),
        # the test runner uses this database as it is (made and migrated by the caller)
        "TEST": {"NAME": _parts.path.lstrip("/")},
        # `?options=-csearch_path%3Dschema` (PostgreSQL): the connection's options
        "OPTIONS": dict(parse_qsl(_parts.query)),
    }}
else:
    _file = os.environ.get("SITE_SQLITE_FILE", str(BASE_DIR / "db.sqlite3"))
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.sqlite3", "NAME": _file,
        # a file, not memory: the worker is another process
        "TEST": {"NAME": _file + ".test"},
    }}

TASKS = {
    "default": {
        "BACKEND": "cronjobs.contrib.django.CronjobsBackend",
        "QUEUES": ["default", "reports"],
    },
    # one attempt per row: a task that raises is FAILED at once
    "once": {
        "BACKEND": "cronjobs.contrib.django.CronjobsBackend",
        "OPTIONS": {"MAX_ATTEMPTS": 1},
    },
}

if os.environ.get("SITE_CRONJOBS_DATABASE"):  # the tests: a DATABASES alias for cronjobs
    CRONJOBS_DATABASE = os.environ["SITE_CRONJOBS_DATABASE"]
