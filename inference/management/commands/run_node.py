"""`manage.py run_node --role draft|verify`: a Celery worker for one node of a pipeline.

It starts with REDIS_URL, TANDEM_API_URL and its node token (TANDEM_NODE_TOKEN) and needs
no database: the token tells the control plane which node it is (TANDEM_NODE_ID or --node,
when given, must match), its placement comes from the API, and its claims, first tokens and
finishes go to the control plane's ledger as signed reports (`inference.ledger`).
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
        if not token:
            raise CommandError("set TANDEM_NODE_TOKEN (the node's tdn_... token)")
        if not env_str("TANDEM_API_URL", ""):
            raise CommandError("set TANDEM_API_URL (the control plane's URL)")
        worker_node.run(
            node_ref=str(node),
            role=role,
            token=token,
            api_url=env_str("TANDEM_API_URL", "") or "",
            loglevel=loglevel,
        )
