"""`manage.py run_ledger`: the ledger consumer (node workers' reports -> the database), until
SIGTERM/Ctrl-C. See `inference.ledger`."""

import logging
import signal
import threading

from django.core.management.base import BaseCommand

from inference.ledger import Ledger


class Command(BaseCommand):
    help = "Apply node workers' signed reports (claims, first tokens, finishes) to the database."

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=500, help="entries per transaction")

    def handle(self, *args, batch: int, **options):
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        self.stdout.write("ledger: consuming node reports")
        self.stdout.flush()
        Ledger(batch=batch).run(stop)
        self.stdout.write("ledger: stopped")
