"""`manage.py bench_draft [--quick] --json FILE`: a target's learned draft against plain
decoding and the n-gram drafter on held-out prompts. Trains the draft first (`train_draft`'s
recipe) when it is missing, so `train_s` is always the draft's own training time. Measured
three ways, each skippable:

- through the real workers (``inference.bench.draft_workers``, in a throw-away stack with its
  own Redis and database, as bench_control): the headline figures (`alpha_learned`,
  `spec_vs_plain_b1`, `greedy_identical`, ...), also under "workers"; --no-workers skips it;
- in-process through the split engines (``inference.bench.draft``), under "inprocess" (the
  headline figures when the workers did not run);
- `online_alpha_gain_rel` (learning from traffic, ``inference.bench.online_draft``) unless
  --no-online; --online-only measures just that."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Benchmark the learned draft of SmolLM2 (or --target) vs plain decoding and n-gram."

    def add_arguments(self, parser):
        parser.add_argument("--json", dest="json_path", default=None, help="write results here")
        parser.add_argument("--quick", action="store_true", help="8 prompts, 32 tokens")
        parser.add_argument("--target", default=None, help="model reference (default smollm2)")
        parser.add_argument(
            "--draft", default=None, help="draft directory (default <target>-draft)"
        )
        parser.add_argument("--minutes", type=float, default=8.5, help="training budget if missing")
        parser.add_argument("--k", type=int, default=4)
        parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
        parser.add_argument("--no-online", action="store_true", help="skip online learning")
        parser.add_argument("--online-only", action="store_true", help="only online learning")
        parser.add_argument("--no-workers", action="store_true", help="skip the workers' run")
        parser.add_argument("--no-inprocess", action="store_true", help="skip the in-process run")
        parser.add_argument("--smoke", action="store_true", help="the harness only (its test)")
        # the throw-away stack's child (stack.run re-runs this command inside it)
        parser.add_argument("--workers-only", action="store_true", help=argparse.SUPPRESS)
        parser.add_argument("--models", default=None, help=argparse.SUPPRESS)

    def handle(self, *args, json_path, quick, target, draft, minutes, k, threads, **opts):
        plan = "smoke" if opts["smoke"] else "quick" if quick else "full"
        if opts["workers_only"]:  # inside the stack: its own database and Redis
            from inference.bench.draft_workers import bench_workers

            out = bench_workers(
                target=Path(target), draft=Path(draft), plan=plan, k=k, log=self.stdout.write
            )
            Path(json_path).write_text(json.dumps(out, indent=2))
            return
        target_dir = self._target(target)
        result: dict = {}
        if not opts["online_only"]:
            inprocess = self._bench(
                target_dir,
                draft,
                quick=plan != "full",
                minutes=minutes,
                k=k,
                threads=threads,
                measure=not opts["no_inprocess"],
            )
            result |= {
                "train_s": inprocess.pop("train_s"),
                "train_cpu_s": inprocess.pop("train_cpu_s"),
                "draft_manifest": inprocess.pop("draft_manifest"),
                "inprocess": inprocess,
            }
            if opts["no_workers"]:
                result |= inprocess  # the headline figures, in-process
            else:
                workers = self._workers(target_dir, Path(inprocess["draft"]), plan=plan, k=k)
                result |= workers | {"workers": workers}
        if not opts["no_online"]:
            result |= self._online(target_dir, quick=quick, k=k, threads=threads)
        self.stdout.write(json.dumps({k: v for k, v in result.items() if k != "draft_manifest"}))
        if json_path:
            Path(json_path).write_text(json.dumps(result, indent=2))

    def _target(self, target):
        from fleet.pipelines.model_refs import model_dir
        from inference.bench.model_sources import find_or_convert_smollm2

        if target:
            return model_dir(target)
        models = Path(settings.DATA_DIR) / "models"
        found, why = find_or_convert_smollm2(
            smol_dir=None, models_dir=models, log=self.stdout.write
        )
        if found is None:
            raise CommandError(why)
        return found

    def _workers(self, target_dir: Path, draft_dir: Path, *, plan: str, k: int) -> dict:
        from inference.bench import stack

        with tempfile.TemporaryDirectory(prefix="bench-draft-") as tmp:
            out = Path(tmp) / "workers.json"
            argv = ["--workers-only", "--target", str(target_dir.resolve())]
            argv += ["--draft", str(draft_dir.resolve()), "--k", str(k), "--json", str(out)]
            argv += ["--quick"] if plan == "quick" else ["--smoke"] if plan == "smoke" else []
            rc = stack.run(
                argv, models=target_dir.parent, log=self.stdout.write, command="bench_draft"
            )
            if rc or not out.exists():
                raise CommandError(f"bench_draft: the workers' run failed (exit {rc})")
            return json.loads(out.read_text())

    def _online(self, target_dir, *, quick, k, threads) -> dict:
        from inference.bench.online_draft import OnlineBenchConfig, run_online_bench

        work = Path(settings.DATA_DIR) / "bench" / f"online-{target_dir.name}"
        cfg = OnlineBenchConfig(target=target_dir, work=work, k=k, threads=threads)
        if quick:
            cfg.start_minutes, cfg.learn_minutes = 2.0, 3.0
            cfg.n_traffic, cfg.n_eval, cfg.max_tokens = 48, 8, 32
        return run_online_bench(cfg, log=self.stdout.write)

    def _bench(self, target_dir, draft, *, quick, minutes, k, threads, measure=True) -> dict:
        from inference.bench.draft import DraftBenchConfig, manifest_of, run_draft_bench
        from inference.management.commands.train_draft import default_out
        from inference.training.learned_draft import Recipe, draft_ready, train_learned_draft

        draft_dir = Path(draft) if draft else default_out(target_dir)
        if not draft_ready(draft_dir):
            self.stdout.write(f"bench_draft: no draft in {draft_dir}: training it first")
            train_learned_draft(
                target_dir, draft_dir, recipe=Recipe(minutes=minutes), log=self.stdout.write
            )
        cfg = DraftBenchConfig(target=target_dir, draft=draft_dir, k=k, threads=threads)
        if quick:
            cfg.n_prompts, cfg.max_tokens = 8, 32
        result = run_draft_bench(cfg, log=self.stdout.write) if measure else {}
        result |= {"draft": str(draft_dir), "draft_manifest": manifest_of(draft_dir)}
        timings = result["draft_manifest"].get("timings_s", {})
        result["train_s"] = timings.get("train_s")
        result["train_cpu_s"] = timings.get("cpu_s")
        return result
