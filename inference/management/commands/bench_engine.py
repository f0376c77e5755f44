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
        parser.add_argument(
            "--preset",
            default=None,
            help="also bench random weights of a model shape: llama-1b (Llama-3.2-1B + an 88M "
            "draft) or tiny; the demo-pair rows run too when the pair exists",
        )

    def handle(
        self,
        *args,
        json_path,
        quick,
        models,
        k,
        reps,
        new_tokens,
        no_smol,
        threads,
        device,
        dtype,
        preset,
        **opts,
    ):
        from inference.bench.engine import BenchConfig, format_table, run_bench, write_json

        models_dir = Path(models) if models else Path(settings.DATA_DIR) / "models"
        target, draft = models_dir / "demo-target", models_dir / "demo-draft"
        have_pair = (target / "config.json").exists() and (draft / "config.json").exists()
        if not have_pair and preset is None:
            raise CommandError(
                f"no demo pair in {models_dir}: run `manage.py train_demo_pair` first"
            )
        result: dict = {}
        if preset is not None:
            from inference.bench.preset import PRESETS

            if preset not in PRESETS:
                raise CommandError(f"unknown preset {preset!r} (choose from {', '.join(PRESETS)})")
            pre = self._preset(preset, device, dtype, k, quick, threads)
        if have_pair:
            cfg = BenchConfig(
                target_dir=target,
                draft_dir=draft,
                models_dir=models_dir,
                k=k,
                threads=threads,
                smol=not no_smol,
                device=device,
                dtype=dtype,
            )
            if quick:
                cfg = cfg.quick_variant()
            if reps:
                cfg.reps = reps
            if new_tokens:
                cfg.new_tokens = new_tokens
            result = run_bench(cfg, log=lambda s: self.stderr.write(s))
            self.stdout.write(format_table(result))
        else:
            self.stderr.write(f"no demo pair in {models_dir}: the demo rows are skipped")
        if preset is not None:  # the preset's figures at the top level, all of it under its key
            result |= {key: v for key, v in pre.items() if key not in result}
            result["preset_bench"] = pre
        if json_path:
            write_json(result, json_path)
            self.stderr.write(f"wrote {json_path}")

    def _preset(self, preset, device, dtype, k, quick, threads):
        import torch

        from inference.bench.preset import PresetConfig, format_preset, run_preset

        prev = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        cfg = PresetConfig(preset=preset, device=device, dtype=dtype, k=k)
        if quick:
            cfg.new_tokens, cfg.reps, cfg.step_reps, cfg.prompt_len = 32, 1, 5, 32
        try:
            r = run_preset(cfg, log=lambda s: self.stderr.write(s))
        finally:
            torch.set_num_threads(prev)
        self.stdout.write(format_preset(r))
        return r
