"""`manage.py train_draft --target T [--minutes N] [--serve]`: train a draft model for any
target (a pipeline's name or a model reference), a thin wrapper over
``inference.training.learned_draft``. With --serve the draft becomes the pipeline's draft
when it is ready, through the pipelines' audited door; `up` runs it in the background for its
`smollm2` pipeline, which serves with the n-gram drafter meanwhile."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


def default_out(target_dir: Path) -> Path:
    return Path(settings.DATA_DIR) / "models" / f"{target_dir.name}-draft"


class Command(BaseCommand):
    help = (
        "Train a draft model (the target's first layers and a reduced-vocabulary head, "
        "distilled from the target's answers to the project's prompts) for a pipeline's "
        "target or a model directory; saved under <DATA_DIR>/models/<target>-draft."
    )

    def add_arguments(self, parser):
        parser.add_argument("--target", required=True, help="a pipeline name or a model reference")
        parser.add_argument("--minutes", type=float, default=8.5, help="time budget (default 8.5)")
        parser.add_argument("--out", default=None, help="directory (default <target>-draft)")
        parser.add_argument("--layers", type=int, default=None, help="draft layers (default 3)")
        parser.add_argument("--vocab", type=int, default=None, help="draft vocabulary size")
        parser.add_argument("--force", action="store_true", help="retrain an existing draft")
        parser.add_argument(
            "--serve",
            action="store_true",
            help="make it the pipeline's draft when ready (audited), unless the pipeline's "
            "operator chose another draft",
        )
        parser.add_argument(
            "--wait-for-target",
            type=float,
            default=0,
            metavar="SECONDS",
            help="wait this long for the target's weights (up's workers convert them)",
        )
        parser.add_argument("--nice", type=int, default=0, help="lower this run's CPU priority")
        parser.add_argument("--threads", type=int, default=None, help="torch threads")

    def handle(self, *args, target, minutes, out, layers, vocab, force, serve, **opts):
        from inference.learned_drafts import resolve_target, serve_learned_draft

        if minutes <= 0:
            raise CommandError("--minutes must be positive")
        pipeline, target_dir = resolve_target(target)
        if serve and pipeline is None:
            raise CommandError(f"--serve needs a pipeline name; {target!r} is not a pipeline")
        out_dir = Path(out) if out else default_out(target_dir)
        self._wait_for(target_dir, opts["wait_for_target"])
        from inference.training.learned_draft import draft_ready

        if draft_ready(out_dir) and not force:
            self.stdout.write(f"train_draft: a draft is already in {out_dir} (--force retrains)")
        else:
            self._train(target_dir, out_dir, minutes, layers, vocab, opts)
        if serve and pipeline is not None:
            ref = out_dir.name if out_dir.parent == Path(settings.DATA_DIR) / "models" else out_dir
            swapped = serve_learned_draft(
                pipeline=pipeline,
                draft_model=str(ref),
                reason=f"the learned draft trained by train_draft is ready ({out_dir.name})",
            )
            self.stdout.write(
                f"train_draft: pipeline {pipeline.name} now drafts with {ref}"
                if swapped
                else f"train_draft: pipeline {pipeline.name} keeps its chosen draft"
            )

    def _wait_for(self, target_dir: Path, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        need = ("config.json", "model.safetensors", "tokenizer.json")
        while not all((target_dir / f).exists() for f in need):
            if time.monotonic() >= deadline:
                raise CommandError(f"no target model in {target_dir} ({', '.join(need)})")
            time.sleep(2.0)

    def _train(self, target_dir, out_dir, minutes, layers, vocab, opts) -> None:
        import torch

        from inference.training.learned_draft import Recipe, train_learned_draft

        if opts["nice"]:
            os.nice(opts["nice"])
        if opts["threads"]:
            torch.set_num_threads(opts["threads"])
        recipe = Recipe(minutes=minutes)
        if layers is not None:
            recipe.n_layers = layers
        if vocab is not None:
            recipe.vocab = vocab
        self.stdout.write(f"train_draft: {target_dir.name} -> {out_dir} ({minutes:g} min)...")
        m = train_learned_draft(target_dir, out_dir, recipe=recipe, log=self._log)
        t = m["timings_s"]
        self.stdout.write(
            self.style.SUCCESS(
                f"train_draft: {m['n_layers']} layers, {m['draft_vocab_size']} tokens; held-out "
                f"agreement {m['heldout_agreement_before']:.3f} -> {m['heldout_agreement']:.3f}; "
                f"{t['train_s']:.0f} s wall, {t['cpu_s']:.0f} s CPU"
            )
        )

    def _log(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()
