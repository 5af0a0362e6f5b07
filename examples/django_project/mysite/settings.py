from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "mysite.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django_tasks",  # Django 6: not needed (django.tasks is built in)
    "ratchet_core.contrib.django",
    "shop",
]

DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "db.sqlite3"}}

# Ratchet's jobs live in DATABASES["default"] (no store.url needed); `migrate` creates its tables.
RATCHET = {"security": {"allowed_packages": "shop"}}

# Django Tasks (@task functions) run on Ratchet workers.
TASKS = {"default": {"BACKEND": "ratchet_core.contrib.django.tasks.RatchetTaskBackend"}}
