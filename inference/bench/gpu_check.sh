#!/bin/bash
# The engine's GPU check, for a machine with CUDA, PyTorch and transformers but without the
# web stack (no Django), in about 8 minutes: the CUDA tests (graph replay == eager for every
# batch bucket and k change, speculative == plain, seeded sampling, a batch that shrinks and
# grows; one copy of every weight), then the llama-1b preset (random weights of Llama-3.2-1B's
# shape + an 88M draft: roofline fraction, batch 1 and 32, verify ratio, c, weights memory,
# CUDA graph capture time, transformers static cache + torch.compile baseline), then the
# demo pair's rows in bf16 when MODELS_DIR holds demo-target and demo-draft.
# Usage: inference/bench/gpu_check.sh [MODELS_DIR] [OUT_DIR]   (OUT_DIR default: $OUT or .)
# Results: tests.txt, preset_llama-1b_bfloat16.json/.txt, bench_engine_cuda_bfloat16.json,
# table_bfloat16.txt and a log per step. Time limits: tests 120 s, preset 270 s (its figures
# are written before the transformers + torch.compile baseline, which may be cut), demo 150 s.
# With the session `run` tool: put the demo pair (manage.py train_demo_pair, ~44 MB) under
# data/models in the tree and carry ["data/models/demo-target", "data/models/demo-draft"];
# command: `bash inference/bench/gpu_check.sh data/models "$OUT"`, timeout_s 580.
set -u
cd "$(dirname "$0")/../.."
MODELS=${1:-data/models}
OUT=${2:-${OUT:-.}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=.
nvidia-smi -L | tee "$OUT/device.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/device.txt"
# tests/conftest.py needs Django: stop conftest discovery at tests/engine
timeout 120 python3 -m pytest -q -p no:cacheprovider -p no:django --confcutdir=tests/engine \
  -o addopts="" tests/engine/test_cuda.py tests/engine/test_memory.py tests/engine/test_static.py \
  -k "not worker" -rs 2>&1 | tail -15 | tee "$OUT/tests.txt"
timeout 270 python3 - "$OUT" <<'PY' 2>"$OUT/log_preset.txt" | tee "$OUT/preset_llama-1b_bfloat16.txt"
import json, sys
from inference.bench.preset import PresetConfig, format_preset, run_preset

out = sys.argv[1]
path = f"{out}/preset_llama-1b_bfloat16.json"
def save(r):
    with open(path, "w") as f:
        json.dump(r, f, indent=2, default=float)
cfg = PresetConfig(preset="llama-1b", device="cuda", dtype="bfloat16", k=4)
r = run_preset(cfg, log=lambda s: print(s, file=sys.stderr), partial=lambda r: (save(r), print(format_preset(r), flush=True)))
save(r)
print(format_preset(r))
PY
if [ -f "$MODELS/demo-target/config.json" ] && [ -f "$MODELS/demo-draft/config.json" ]; then
  timeout 150 python3 - "$MODELS" bfloat16 "$OUT" <<'PY' 2>"$OUT/log_bfloat16.txt" | tee "$OUT/table_bfloat16.txt"
import sys
from pathlib import Path

from inference.bench.engine import BenchConfig, format_table, run_bench, write_json

models, dtype, out = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
cfg = BenchConfig(target_dir=models / "demo-target", draft_dir=models / "demo-draft",
                  smol=False, device="cuda", dtype=dtype, threads=None, reps=3,
                  sweep_ks=(2, 4), sweep_batches=(1, 16), sweep_reps=1)
result = run_bench(cfg, log=lambda s: print(s, file=sys.stderr))
print(format_table(result))
write_json(result, f"{out}/bench_engine_cuda_{dtype}.json")
PY
else
  echo "no demo pair in $MODELS: demo rows skipped (train it with manage.py train_demo_pair, or carry data/models)" | tee "$OUT/table_bfloat16.txt"
fi
