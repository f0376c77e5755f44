"""`manage.py bench_engine`: our engine vs Hugging Face transformers, one table (a thin
wrapper over ``inference.bench.engine``)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Benchmark plain and speculative decoding (ours vs transformers) on the demo pair."

    def add_arguments(self, parser):
        parser.add_argument(
            "--json", dest="json_path", default=None, help="also write results to FILE"
        )
        parser.add_argument("--quick", action="store_true", help="smoke test (< 2 min)")
        parser.add_argument(
            "--models", default=None, help="models directory (default <DATA_DIR>/models)"
        )
        parser.add_argument("--k", type=int, default=4)
        parser.add_argument("--reps", type=int, default=None)
        parser.add_argument("--new-tokens", type=int, default=None)
        parser.add_argument("--no-smol", action="store_true", help="skip the SmolLM2 rows")
        parser.add_argument(
            "--threads", type=int, default=1, help="torch threads, both engines (default 1)"
        )
        parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] (both engines)")
        parser.add_argument(
            "--dtype", default="float32", choices=["float32", "bfloat16"], help="both engines"
        )

    def handle(
        self, *args, json_path, quick, models, k, reps, new_tokens, no_smol, threads, device,
        dtype, **opts,
    ):  # fmt: skip
        from inference.bench.engine import BenchConfig, format_table, run_bench, write_json

        models_dir = Path(models) if models else Path(settings.DATA_DIR) / "models"
        target, draft = models_dir / "demo-target", models_dir / "demo-draft"
        if not (target / "config.json").exists() or not (draft / "config.json").exists():
            raise CommandError(
                f"no demo pair in {models_dir}: run `manage.py train_demo_pair` first"
            )
        cfg = BenchConfig(target_dir=target, draft_dir=draft, models_dir=models_dir, k=k, threads=threads, smol=not no_smol, device=device, dtype=dtype)  # fmt: skip
        if quick:
            cfg = cfg.quick_variant()
        if reps:
            cfg.reps = reps
        if new_tokens:
            cfg.new_tokens = new_tokens
        result = run_bench(cfg, log=lambda s: self.stderr.write(s))
        self.stdout.write(format_table(result))
        if json_path:
            write_json(result, json_path)
            self.stderr.write(f"wrote {json_path}")
