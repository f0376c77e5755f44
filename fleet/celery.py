"""The Celery app. Workers for nodes are started by `manage.py run_node`."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleet.settings")

app = Celery("tandem")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="tandem.ping")
def ping() -> str:
    return "pong"
