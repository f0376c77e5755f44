"""`manage.py run_node --role draft|verify`: a Celery worker for one node of a pipeline.

The node comes from TANDEM_NODE_ID (id or name) or --node, its token from
TANDEM_NODE_TOKEN, the control plane's URL from TANDEM_API_URL (heartbeats over HTTP;
without it, the agent writes heartbeats through the database on this machine).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from fleet.env import env_str


class Command(BaseCommand):
    help = "Run a drafter or verifier node worker (engine loop + agent + Celery consumer)."

    def add_arguments(self, parser):
        parser.add_argument("--role", choices=["draft", "verify"], required=True)
        parser.add_argument("--node", default=env_str("TANDEM_NODE_ID", ""))
        parser.add_argument("--loglevel", default="WARNING")
        parser.add_argument(
            "--local",
            default="",
            metavar="PIPELINE",
            help="Serve this machine's pipeline PIPELINE (smollm2, demo), setting up its rows "
            "and models first if missing (used by `manage.py up`)",
        )
        parser.add_argument("--demo", action="store_true", help="the same as --local demo")

    def handle(self, *args, role, node, loglevel, local, demo, **options):
        from inference.worker import boot as worker_node

        token = env_str("TANDEM_NODE_TOKEN", "")
        local = local or ("demo" if demo else "")
        if local:
            from inference.worker.local import ensure_local

            node, token = ensure_local(name=local, role=role, log=self.stdout.write)
        if not node:
            raise CommandError("set TANDEM_NODE_ID (node id or name) or pass --node")
        if not token:
            raise CommandError("set TANDEM_NODE_TOKEN (the node's tdn_... token)")
        worker_node.run(
            node_ref=str(node),
            role=role,
            token=token,
            api_url=env_str("TANDEM_API_URL", "") or "",
            loglevel=loglevel,
        )
