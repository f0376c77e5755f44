"""`manage.py bench_serving [--json FILE]`: tokens/s, ITL, verifier batch sizes through the
real API and workers vs the engine in one process (logic in inference.bench.serving)."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand

from fleet.env import env_bool


class Command(BaseCommand):
    help = "Benchmark serving through the real API and node workers (N = 1, 8, 32 clients)."

    def add_arguments(self, parser):
        parser.add_argument("--json", default=None, help="also write the figures to FILE")
        parser.add_argument(
            "--models",
            default=None,
            help="directory with demo-target and demo-draft (default DATA_DIR/models)",
        )
        parser.add_argument("--clients", default="1,8,32", help="comma-separated N")
        parser.add_argument("--requests", type=int, default=2, help="requests per client")
        parser.add_argument("--max-tokens", type=int, default=64)
        parser.add_argument("--k", type=int, default=4)
        parser.add_argument("--max-verify-batch", type=int, default=32)
        parser.add_argument("--max-batch-wait-ms", type=int, default=100)
        parser.add_argument(
            "--api",
            choices=["openai", "rest"],
            default="openai",
            help="streaming POST /v1/completions (default), or the REST API and its SSE stream",
        )

    def handle(self, *args, **o):
        from inference.bench import serving, stack

        models = stack.demo_pair_dir(o["models"])
        if not env_bool("TANDEM_BENCH_CHILD", False):
            argv = [
                "--clients",
                o["clients"],
                "--requests",
                str(o["requests"]),
                "--max-tokens",
                str(o["max_tokens"]),
                "--k",
                str(o["k"]),
                "--max-verify-batch",
                str(o["max_verify_batch"]),
                "--max-batch-wait-ms",
                str(o["max_batch_wait_ms"]),
                "--api",
                o["api"],
            ]
            if o["json"]:
                argv += ["--json", str(Path(o["json"]).resolve())]
            raise SystemExit(stack.run(argv, models=models, log=self.stdout.write))
        report = serving.bench(
            models=models,
            ns=[int(n) for n in o["clients"].split(",")],
            requests_per_client=o["requests"],
            max_tokens=o["max_tokens"],
            k=o["k"],
            max_batch=o["max_verify_batch"],
            wait_ms=o["max_batch_wait_ms"],
            api=o["api"],
            log=self.stdout.write,
        )
        big = max(int(n) for n in o["clients"].split(","))
        self.stdout.write(
            f"mean verify batch at N={big}: {report[f'mean_verify_batch_n{big}']:.1f} "
            "(target >= 16); "
            f"workers/in-process tokens/s at N={big}: {report[f'workers_vs_inprocess_n{big}']:.2f} "
            "(target >= 0.6 on 2 cores, >= 0.85 on 16: issue 13)"
        )
        self.stdout.write(
            f"TTFT at N={big}: p50 {report[f'ttft_p50_ms_n{big}']:.0f} ms, "
            f"p99 {report[f'ttft_p99_ms_n{big}']:.0f} ms (target p50 <= 250); "
            f"web CPU per request {report['web_cpu_ms_per_request']:.1f} ms (target <= 5)"
        )
        if o["json"]:
            Path(o["json"]).write_text(json.dumps(report, indent=2))
            self.stdout.write(f"wrote {o['json']}")
