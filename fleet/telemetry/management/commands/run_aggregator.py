"""`manage.py run_aggregator`: the telemetry aggregator, until SIGTERM/Ctrl-C."""

import asyncio
import faulthandler
import gc
import signal

from django.core.management.base import BaseCommand

from fleet.telemetry.aggregator import Aggregator
from fleet.telemetry.ingest import redis_url


class Command(BaseCommand):
    help = "Aggregate node telemetry from Redis into live websocket updates, /metrics and rollups."

    def add_arguments(self, parser):
        parser.add_argument("--tick", type=float, default=0.5, help="seconds between pushes")

    def handle(self, *args, tick: float, **options):
        faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>`: where is it stuck?
        # Tens of thousands of live samples are young objects that live seconds: the default
        # thresholds ran a full collection every few hundred ms at 10,000 nodes.
        gc.set_threshold(50_000, 20, 50)
        url = redis_url()
        asyncio.run(self._main(url, tick))

    async def _main(self, url: str, tick: float) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        self.stdout.write(f"aggregator: tick {tick}s, redis {url.split('@')[-1]}")
        await Aggregator(tick_s=tick).run(redis_url=url, stop=stop)
        self.stdout.write("aggregator: stopped")
