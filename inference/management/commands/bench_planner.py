"""`manage.py bench_planner [--json FILE]`: the planner's predictions against the real engine
on this machine (measured vs predicted goodput for k = 0..6 at batch 1, 4, 16; the planner's
chosen k vs the best k of the sweep). See fleet/planner/bench.py."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


def _has_pair(d: Path) -> bool:
    return (d / "demo-target" / "config.json").exists() and (
        d / "demo-draft" / "config.json"
    ).exists()


class Command(BaseCommand):
    help = (
        "Measure goodput of the real engine for several k and batch sizes "
        "beside the planner's prediction."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--json", dest="json_path", default=None, help="write the report to FILE"
        )
        parser.add_argument(
            "--models",
            default=None,
            help="directory with demo-target/ and demo-draft/ (default <DATA_DIR>/models)",
        )
        parser.add_argument("--new-tokens", type=int, default=48)
        parser.add_argument("--prompt-len", type=int, default=32)
        parser.add_argument(
            "--reps", type=int, default=5, help="repetitions of the sweep (best run counts)"
        )
        parser.add_argument("--batches", default="1,4,16")
        parser.add_argument("--k-max", type=int, default=6)
        parser.add_argument(
            "--threads",
            type=int,
            default=1,
            help="torch threads (1: the engine runs on the calling thread)",
        )
        parser.add_argument(
            "--clock",
            choices=["cpu", "wall"],
            default="cpu",
            help="cpu: CPU seconds of the engine thread (steady on a shared machine, equal to "
            "wall time on an idle one); wall: wall-clock seconds",
        )

    def handle(
        self,
        *args,
        json_path,
        models,
        new_tokens,
        prompt_len,
        reps,
        batches,
        k_max,
        threads,
        clock,
        **opts,
    ):
        from inference.bench import planner

        try:
            batch_sizes = tuple(int(b) for b in batches.split(","))
        except ValueError as exc:
            raise CommandError("--batches takes integers, e.g. 1,4,16") from exc
        if (
            not batch_sizes
            or min(batch_sizes) < 1
            or not 0 <= k_max <= 16
            or new_tokens < 2
            or reps < 1
        ):
            raise CommandError(
                "need batch sizes >= 1, 0 <= k-max <= 16, new-tokens >= 2, reps >= 1"
            )
        models_dir = Path(models) if models else Path(settings.DATA_DIR) / "models"
        source = "demo pair"
        if not _has_pair(models_dir):
            fallback = Path(settings.DATA_DIR) / "bench-pair"
            if not _has_pair(fallback):
                self.stderr.write(
                    f"no demo pair in {models_dir}: "
                    f"training the tiny pair into {fallback} (seconds)"
                )
                from inference.training.demo_pair import train_demo_pair

                train_demo_pair(fallback, preset="tiny", threads=threads)
            models_dir, source = (
                fallback,
                "tiny pair (run `manage.py train_demo_pair` for the demo pair)",
            )
        started = time.monotonic()
        self.stderr.write(
            f"sweep on {models_dir} ({source}): batches {batch_sizes}, k 0..{k_max}, "
            f"{new_tokens} new tokens, {reps} reps"
        )
        ks = tuple(range(k_max + 1))
        results, timings = planner.run_sweep(
            models_dir,
            batches=batch_sizes,
            ks=ks,
            new_tokens=new_tokens,
            prompt_len=prompt_len,
            reps=reps,
            threads=threads,
            clock=clock,
            log=self.stderr.write,
        )
        m, prefill, fits = planner.fit_model(results, timings, max(k_max, 1))
        report = planner.compare(
            results,
            m,
            prefill,
            new_tokens=new_tokens,
            batches=batch_sizes,
            ks=ks,
            traces=timings.traces,
        )
        report.update(
            {
                "fits": fits,
                "models": str(models_dir),
                "pair": source,
                "new_tokens": new_tokens,
                "prompt_len": prompt_len,
                "reps": reps,
                "clock": clock,
                "threads": threads,
                "load_average": list(os.getloadavg()),
                "cpus": os.cpu_count(),
                "machine": platform.platform(),
                "seconds": round(time.monotonic() - started, 1),
                "predictions": (
                    "modeled (fleet.planner.batch_runs.predict_run_trace / predict_run "
                    "with curves fitted to this sweep)"
                ),
            }
        )
        self.stdout.write(planner.format_rows(report))
        self.stdout.write(f"fitted: {json.dumps(fits)}")
        if json_path:
            Path(json_path).write_text(json.dumps(report, indent=2))
            self.stderr.write(f"wrote {json_path}")
