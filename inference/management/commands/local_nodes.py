"""`manage.py local_nodes [PIPELINE ...]`: register this machine's local pipelines' nodes and
leave their tokens in DATA_DIR/nodes/ for `run_node --local` (see `inference.local_nodes`).
Without arguments: TANDEM_DEFAULT_PIPELINES."""

from django.core.management.base import BaseCommand

from inference.local_nodes import local_nodes_write
from inference.local_pipelines import default_pipelines


class Command(BaseCommand):
    help = "Register the local pipelines' nodes and write their credentials for run_node --local."

    def add_arguments(self, parser):
        parser.add_argument("pipelines", nargs="*")

    def handle(self, *args, pipelines, **options):
        names = local_nodes_write(pipelines=pipelines or default_pipelines())
        if options["verbosity"]:
            self.stdout.write(f"local nodes ready: {', '.join(names) or 'none'}")
