#!/bin/bash
# The engine's GPU check, for a machine with CUDA, PyTorch and transformers but without the
# web stack (no Django): the CUDA tests, then bench_engine's cases on the demo pair in fp32
# and bf16. Usage: inference/bench/gpu_check.sh [MODELS_DIR] [OUT_DIR]
# (the figures in the README's H200 columns came from this script).
set -u
cd "$(dirname "$0")/../.."
MODELS=${1:-data/models}
OUT=${2:-.}
export PYTHONUNBUFFERED=1 PYTHONPATH=.
nvidia-smi -L
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
# tests/conftest.py needs Django: stop conftest discovery at tests/engine
timeout 300 python3 -m pytest -q -p no:cacheprovider -p no:django --confcutdir=tests/engine \
  -o addopts="" tests/engine/test_cuda.py tests/engine/test_hf_parity.py 2>&1 | tail -3 | tee "$OUT/tests.txt"
for dtype in bfloat16 float32; do
  timeout 300 python3 - "$MODELS" "$dtype" "$OUT" <<'PY' 2>"$OUT/log_$dtype.txt" | tee "$OUT/table_$dtype.txt"
import sys
from pathlib import Path

from inference.bench.engine import BenchConfig, format_table, run_bench, write_json

models, dtype, out = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
cfg = BenchConfig(target_dir=models / "demo-target", draft_dir=models / "demo-draft",
                  smol=False, device="cuda", dtype=dtype, threads=None)
result = run_bench(cfg, log=lambda s: print(s, file=sys.stderr))
print(format_table(result))
write_json(result, f"{out}/bench_engine_cuda_{dtype}.json")
PY
done
