"""bench_engine --preset on the tiny shape (CPU): runs without a demo pair and writes the
roofline/graph/memory keys the GPU check reads."""

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

KEYS = {
    "b1_plain_tok_s",
    "b1_roofline_fraction",
    "b1_vs_hf_compiled",
    "b32_plain_tok_s",
    "verify_ratio_b1",
    "verify_ratio_b32",
    "c_b1",
    "weights_memory_ratio",
    "graph_capture_s",
    "attention",
    "preset_bench",
}


def test_tiny_preset_json_without_a_demo_pair(tmp_path, capsys):
    path = tmp_path / "b.json"
    call_command(
        "bench_engine",
        "--preset",
        "tiny",
        "--quick",
        "--models",
        str(tmp_path / "none"),
        "--json",
        str(path),
    )
    data = json.loads(path.read_text())
    assert KEYS <= data.keys()
    assert data["b1_plain_tok_s"] > 0 and data["b32_plain_tok_s"] > 0
    assert data["verify_ratio_b1"] > 0 and data["c_b1"] > 0
    assert data["b1_roofline_fraction"] is None  # no known memory bandwidth on a CPU
    assert data["weights_memory"]["ratio"] <= 1.05  # CPU kernel-layout copies apart
    assert data["graph_capture_s"] == 0.0  # no CUDA graphs on a CPU
    assert "batch 32: plain decode" in capsys.readouterr().out


def test_unknown_preset_is_refused(tmp_path):
    with pytest.raises(CommandError, match="unknown preset"):
        call_command("bench_engine", "--preset", "nope", "--models", str(tmp_path))
