"""`manage.py up`: everything Tandem needs on one machine, until Ctrl-C.

Redis (embedded, unless REDIS_URL is set; supervised and persistent), migrations, a first
admin account, static files, the control-plane Celery worker, the node workers, the
simulator and the ASGI web server.
Children are supervised by `fleet.runtime.launcher`: one that dies is restarted with backoff while
the others keep serving. A node worker's death is reported to the control plane at once
(`_node_child_exited`), so its generations are re-routed or ended within a second.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections, transaction

from fleet.accounts.services import user_set_role
from fleet.datadir import write_private
from fleet.env import env_int, env_str
from fleet.runtime import launcher
from fleet.runtime.children import children
from fleet.runtime.embedded_redis import ensure_redis_url
from fleet.runtime.supervision import state_path

ADMIN_USERNAME = "admin"
# The first-run password is written here (0600), never to a log or a captured stdout.
PASSWORD_FILE = "admin-password"


def _check_port_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise CommandError(
                f"cannot listen on {host}:{port} ({exc.strerror}): is Tandem already running? "
                "Choose another port with TANDEM_PORT."
            ) from exc


@transaction.atomic
def _create_first_admin() -> str | None:
    """On the first run only: an `admin` superuser in the admin role; returns its password."""
    users = get_user_model().objects
    if users.filter(username=ADMIN_USERNAME).exists() or users.filter(is_superuser=True).exists():
        return None
    password = secrets.token_urlsafe(18)
    user = users.create_superuser(username=ADMIN_USERNAME, email="", password=password)
    user_set_role(user=user, role="admin")
    return password


def _node_child_exited(spec: launcher.ChildSpec, reason: str) -> None:
    """The supervisor saw a node worker die: its node is lost now, its generations move to
    a healthy pair, go on plainly on their verifier (a dead drafter) or end with an error
    (the heartbeat window would take 15 s)."""
    if not spec.node:
        return
    from inference.services import node_process_gone

    report = node_process_gone(node_ref=spec.node, reason=f"its worker {reason}")
    if any(report.values()):
        moved, failed = len(report["rerouted"]), len(report["failed"])
        plain = len(report["degraded"])
        print(
            f"  {spec.node}: {moved} generation(s) re-routed, {plain} finished by their verifier "
            f"alone (plain decoding), {failed} ended with an error"
        )


def _use_started_redis(url: str) -> None:
    """Settings were read before the embedded Redis existed; this process sends messages
    to node workers too (`_node_child_exited` re-routes), so its Celery app needs the URL,
    and so does its channel layer (the demo pipelines' first revisions push change markers)."""
    from channels.layers import channel_layers

    from fleet.celery import app

    settings.CELERY_BROKER_URL = settings.CELERY_RESULT_BACKEND = url
    app.conf.update(broker_url=url, result_backend=url)
    for host in settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"]:  # type: ignore[index]
        host["address"] = url
    channel_layers.backends.clear()


def _close_orphans(specs: list[launcher.ChildSpec]) -> None:
    """Generations a previous run left active on this machine's nodes end (or move to a
    healthy remote pair) before anything starts: their workers are gone."""
    for spec in specs:
        if spec.node:
            _node_child_exited(spec, "was not running when Tandem started")


class Command(BaseCommand):
    help = "Start Tandem on this machine (Redis, migrations, admin, worker, web) until Ctrl-C."

    def handle(self, *args, **options):
        host = env_str("TANDEM_HOST", "127.0.0.1")
        port = env_int("TANDEM_PORT", 8000, minimum=1)
        _check_port_free(host, port)

        supervisor = launcher.Supervisor(
            env={},
            log=self._say,
            state_file=state_path(settings.DATA_DIR),
            on_exit=_node_child_exited,
        )
        supervisor.install_signal_handlers()  # from here on, Ctrl-C stops what we started
        redis_server = None
        exit_code = 0
        try:
            redis_server = ensure_redis_url(settings.DATA_DIR)
            if redis_server and redis_server.process:  # supervised: restarted if it dies
                supervisor.adopt(redis_server.child_spec(), redis_server.process)
            settings.REDIS_URL = env_str("REDIS_URL")
            _use_started_redis(settings.REDIS_URL)

            call_command("migrate", interactive=False, verbosity=0)
            call_command("local_nodes", verbosity=0)  # node workers hold no DB credentials
            password = _create_first_admin()
            if password:
                write_private(settings.DATA_DIR / PASSWORD_FILE, password + "\n")
            call_command("collectstatic", interactive=False, verbosity=0)
            connections.close_all()

            supervisor.env = {
                **os.environ,
                "DJANGO_SETTINGS_MODULE": env_str("DJANGO_SETTINGS_MODULE", "fleet.settings"),
                "TANDEM_DATA_DIR": str(settings.DATA_DIR),
                "REDIS_URL": settings.REDIS_URL,
                "PYTHONUNBUFFERED": "1",
            }
            specs = children(settings, host=host, port=port)
            _close_orphans(specs)
            for spec in specs:
                if supervisor.stop_requested:
                    break
                supervisor.start(spec)
            for spec in specs:
                if spec.ready_url and not supervisor.stop_requested:
                    supervisor.wait_ready(spec)

            if not supervisor.stop_requested:
                self._announce(host, port, password)
                supervisor.watch()
        except launcher.ChildFailed as exc:
            self.stderr.write(self.style.ERROR(f"\n!!! {exc}: stopping everything\n"))
            exit_code = 1
        finally:
            self._say("\nStopping Tandem...")
            supervisor.stop_all()  # the embedded Redis, started first, stops last
            if redis_server:
                redis_server.stop()  # its URL record
            self._say("Stopped.")
        if exit_code:
            sys.exit(exit_code)

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def _announce(self, host: str, port: int, password: str | None) -> None:
        shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        if ":" in shown:
            shown = f"[{shown}]"
        url = f"http://{shown}:{port}/"
        lines = ["", self.style.SUCCESS(f"Tandem is running at {url}")]
        lines.append(f"  API docs: {url}api/v1/docs/")
        if password:
            where = settings.DATA_DIR / PASSWORD_FILE
            lines += [
                "",
                self.style.WARNING(
                    f"  First run: an admin account `{ADMIN_USERNAME}` was created."
                ),
                self.style.WARNING(f"  Its password is in {where} (readable by you only);"),
                self.style.WARNING("  change it at /admin/, then delete that file."),
            ]
            if self.stdout.isatty():  # a person, not a log, is reading: show it too
                lines.append(f"    password: {password}")
        lines += ["", "Press Ctrl-C to stop.", ""]
        self._say("\n".join(lines))
