"""The Celery app. Workers for nodes are started by `manage.py run_node`."""

import logging
import os

from celery import Celery

from fleet.logs import ThrottleFilter

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleet.settings")

app = Celery("tandem")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# While Redis (the broker) is away, beat logs a traceback for every task it cannot send
# (the watchdog's every second): once, then a summary every 30 s.
logging.getLogger("celery.beat").addFilter(ThrottleFilter(every_s=30.0))


@app.task(name="tandem.ping")
def ping() -> str:
    return "pong"
