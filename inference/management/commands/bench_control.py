"""`manage.py bench_control [--quick] [--json FILE]`: adaptive k against every fixed k, the
planner's predictions against measured runs, and the time to roll back a bad apply, through
the real workers (logic in inference.bench.control)."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand

from fleet.env import env_bool


class Command(BaseCommand):
    help = "Benchmark speculation control through the real workers (demo and smollm2)."

    def add_arguments(self, parser):
        parser.add_argument("--json", default=None, help="also write the figures to FILE")
        parser.add_argument("--quick", action="store_true", help="k in 0,1,2,4,8; fewer requests")
        parser.add_argument("--smoke", action="store_true", help="the harness only (its test)")
        parser.add_argument(
            "--pipelines", default="demo,smollm2", help="which of up's pipelines (comma list)"
        )
        parser.add_argument("--models", default=None, help="directory with the demo pair")

    def handle(self, *args, **o):
        from inference.bench import control, stack

        models = stack.demo_pair_dir(o["models"])
        if not env_bool("TANDEM_BENCH_CHILD", False):
            argv = ["--quick"] if o["quick"] else []
            argv += ["--smoke"] if o["smoke"] else []
            argv += ["--pipelines", o["pipelines"]]
            if o["json"]:
                argv += ["--json", str(Path(o["json"]).resolve())]
            raise SystemExit(
                stack.run(argv, models=models, log=self.stdout.write, command="bench_control")
            )
        plan = "smoke" if o["smoke"] else "quick" if o["quick"] else "full"
        pipelines = tuple(p for p in o["pipelines"].split(",") if p)
        report = control.bench(models=models, plan=plan, log=self.stdout.write, pipelines=pipelines)
        self.stdout.write(
            "adaptive / best fixed k (min) {adaptive_vs_best_fixed_min} (target >= 0.95; "
            "the best k picked on the other repetition: {adaptive_vs_best_fixed_held_out_min}); "
            "adaptive / plain (min) {adaptive_vs_plain_min} (target >= 1.0); "
            "the best fixed k against its own repetition (min) "
            "{best_fixed_repeat_agreement_min}; "
            "adapt_rounds {adapt_rounds} (target <= 20); "
            "planner_apply_error_max_pct {planner_apply_error_max_pct} (target <= 15); "
            "bad_apply_rollback_s {bad_apply_rollback_s} (target <= 60)".format(**report)
        )
        control.main_json(report, o["json"])
        if o["json"]:
            self.stdout.write(f"wrote {o['json']}")
