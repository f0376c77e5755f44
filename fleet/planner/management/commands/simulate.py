"""`manage.py simulate --nodes 1000 --pipelines 8 [--seconds N]`: a simulated fleet sending
telemetry through the real ingest path. Simulated nodes and pipelines are marked simulated."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from fleet.planner import simulator


class Command(BaseCommand):
    help = "Run a simulated fleet (virtual nodes from the hardware catalogue) in one process."

    def add_arguments(self, parser):
        parser.add_argument("--nodes", type=int, default=1000)
        parser.add_argument("--pipelines", type=int, default=8)
        parser.add_argument(
            "--seconds",
            type=float,
            default=None,
            help="stop after N seconds (default: run until stopped)",
        )
        parser.add_argument("--tick", type=float, default=1.0, help="seconds between samples")
        parser.add_argument(
            "--alpha", default="", help="comma-separated alpha per pipeline (cycled)"
        )
        parser.add_argument(
            "--prefix", default="sim", help="name prefix of simulated nodes and pipelines"
        )
        parser.add_argument(
            "--reset", action="store_true", help="delete this prefix's simulated fleet first"
        )
        parser.add_argument("--seed", type=int, default=0)

    def handle(self, *args, nodes, pipelines, seconds, tick, alpha, prefix, reset, seed, **opts):
        if nodes < 2 or pipelines < 1:
            raise CommandError("--nodes must be >= 2 and --pipelines >= 1")
        if tick <= 0:
            raise CommandError("--tick must be positive")
        try:
            alphas = (
                tuple(float(a) for a in alpha.split(",") if a.strip()) or simulator.DEFAULT_ALPHAS
            )
        except ValueError as exc:
            raise CommandError("--alpha takes numbers, e.g. 0.6,0.8") from exc
        if any(not 0 <= a < 1 for a in alphas):
            raise CommandError("--alpha values must be in [0, 1)")
        started = time.monotonic()
        by_pipeline = simulator.setup_fleet(
            nodes=nodes, pipelines=pipelines, prefix=prefix, alphas=alphas, reset=reset
        )
        from fleet.nodes.models import Node

        n_nodes = Node.objects.filter(simulated=True, name__startswith=f"{prefix}-").count()
        if n_nodes != nodes:
            self.stdout.write(
                f"reusing the existing simulated fleet {prefix!r} of {n_nodes} nodes "
                "(--reset rebuilds it with --nodes/--pipelines)"
            )
        self.stdout.write(
            f"simulated fleet {prefix!r}: {n_nodes} nodes, {len(by_pipeline)} pipelines, set up in "
            f"{time.monotonic() - started:.1f}s; sending telemetry every {tick}s (simulated)"
        )
        sim = simulator.Simulator(by_pipeline, tick_s=tick, seed=seed, prefix=prefix)
        sent = sim.run(seconds)
        self.stdout.write(f"stopped: {sent} samples sent")
