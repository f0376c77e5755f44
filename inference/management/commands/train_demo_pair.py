"""`manage.py train_demo_pair`: train the demo target/draft pair (a thin wrapper over
``inference.training.demo_pair``)."""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = (
        "Train the demo pair (byte-level target + distilled draft on the Python standard "
        "library) into <DATA_DIR>/models/demo-target and demo-draft, with demo_pair.json."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--out", default=None, help="models directory (default <DATA_DIR>/models)"
        )
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--force", action="store_true", help="retrain even if the pair exists")
        parser.add_argument(
            "--preset", default="demo", help="demo (default) or tiny (seconds, for smoke tests)"
        )
        parser.add_argument(
            "--threads", type=int, default=None, help="torch threads (default: all usable CPUs)"
        )
        parser.add_argument(
            "--report-to",
            default=None,
            metavar="PIPELINE",
            help="also publish the progress as PIPELINE's warm-up (shown on the console)",
        )

    def handle(self, *args, out, seed, force, preset, threads, report_to, **options):
        from inference.training.demo_pair import (
            PRESETS,
            TqdmProgress,
            pair_exists,
            pair_paths,
            total_units,
            train_demo_pair,
        )

        if preset not in PRESETS:
            raise CommandError(f"unknown preset {preset!r} (choose from {', '.join(PRESETS)})")
        out_dir = Path(out) if out else Path(settings.DATA_DIR) / "models"
        if pair_exists(out_dir) and not force:
            m = json.loads(pair_paths(out_dir)[2].read_text())
            self.stdout.write(
                f"demo pair already in {out_dir} (seed {m.get('seed')}); use --force to retrain"
            )
            return
        total = total_units(PRESETS[preset])
        progress = TqdmProgress(total) if not report_to else _reported_progress(total, report_to)
        manifest = train_demo_pair(
            out_dir,
            seed=seed,
            preset=preset,
            threads=threads,
            progress=progress,
            log=self.stdout.write,
        )
        g = manifest["heldout"]["greedy"]
        self.stdout.write(
            self.style.SUCCESS(
                f"target {manifest['target']['params'] / 1e6:.2f}M, "
                f"draft {manifest['draft']['params'] / 1e6:.2f}M params; "
                f"held-out greedy acceptance at k={g['k']}: {g['acceptance_rate']:.3f} "
                f"(mean acceptance length {g['mean_acceptance_length']:.2f}); "
                f"{manifest['timings_s']['total_s']:.0f} s"
            )
        )


def _reported_progress(total: int, pipeline: str):
    """A terminal progress bar that also publishes the warm-up state (the console, the API)."""
    from inference.training.demo_pair import TqdmProgress
    from inference.warmup import WarmupReporter

    class Reported(TqdmProgress):
        def __init__(self) -> None:
            super().__init__(total)
            self.reporter = WarmupReporter(
                pipeline=pipeline, waiting_for="training the demo model pair (once)"
            )
            self.reporter.report(0.0, force=True)

        def advance(self, n: int = 1, desc: str | None = None, **postfix) -> None:
            super().advance(n, desc, **postfix)
            self.reporter.report(self.bar.n / self.total)

    return Reported()
