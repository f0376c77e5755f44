"""`manage.py bench_fleet_api --nodes 10000 --json F`: the node list API, pipeline actions
(move, drain, return), /metrics, the planner's what-if and the fleet page, timed at fleet scale
(see fleet/planner/fleet_bench.py for what each figure is).

By default it works in a database and a Redis of its own: a throwaway database made like
the test runner's (`bench_fleet_api.sqlite3` in the data directory, or `test_bench_fleet_api`
on PostgreSQL when DATABASE_URL points there), migrated, filled, and dropped at the end; and a
private embedded Redis. Your data and your live fleet are not touched. `--use-current-db`
(used by the tests, which already run in a test database) skips both.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from fleet.planner import fleet_bench

BENCH_DB = "bench_fleet_api"


class Command(BaseCommand):
    help = "Time the control plane's API, /metrics, what-if and fleet page at N simulated nodes."

    def add_arguments(self, parser):
        parser.add_argument("--nodes", type=int, default=10_000)
        parser.add_argument("--pipelines", type=int, default=4)
        parser.add_argument("--rounds", type=int, default=5, help="repeats of each read")
        parser.add_argument("--actions", type=int, default=20, help="moves and drains timed")
        parser.add_argument("--json", dest="json_path", default="", help="write figures here")
        parser.add_argument(
            "--use-current-db",
            action="store_true",
            help="seed the configured database and Redis instead of throwaway ones",
        )

    def handle(self, *args, nodes, pipelines, rounds, actions, json_path, use_current_db, **o):
        if nodes < 4 or pipelines < 2 or nodes < 2 * pipelines:
            raise CommandError("need --pipelines >= 2 and --nodes >= 2 x pipelines")
        if rounds < 1 or actions < 1:
            raise CommandError("--rounds and --actions must be >= 1")
        if use_current_db:
            result = fleet_bench.run(
                nodes=nodes, pipelines=pipelines, rounds=rounds, actions=actions
            )
        else:
            result = self._isolated(
                lambda: fleet_bench.run(
                    nodes=nodes, pipelines=pipelines, rounds=rounds, actions=actions
                )
            )
        text = json.dumps(result, indent=2)
        if json_path:
            Path(json_path).write_text(text + "\n")
        self.stdout.write(text)

    def _isolated(self, work):
        from fleet.celery import app
        from fleet.runtime.embedded_redis import EmbeddedRedis

        test_settings = connection.settings_dict.setdefault("TEST", {})
        if connection.vendor == "sqlite":
            test_settings["NAME"] = str(settings.DATA_DIR / f"{BENCH_DB}.sqlite3")
        else:
            test_settings["NAME"] = f"test_{BENCH_DB}"
        old_name = connection.settings_dict["NAME"]
        old_redis, old_broker = settings.REDIS_URL, app.conf.broker_url
        with tempfile.TemporaryDirectory(prefix="tandem-bench-") as tmp:
            redis = EmbeddedRedis(Path(tmp), record=False)
            settings.REDIS_URL = redis.start()
            # config pushes go to this Redis's queues, where no worker reads them
            app.conf.broker_url = settings.REDIS_URL
            connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
            try:
                return work()
            finally:
                connection.creation.destroy_test_db(old_name, verbosity=0)
                settings.REDIS_URL, app.conf.broker_url = old_redis, old_broker
                redis.stop()
