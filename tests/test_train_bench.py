"""train/bench.py end to end on the tiny local model: every configuration trains the same rows
(same token count), the table carries the ceiling share, the profiler table and the one-epoch
estimate come out of the same run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fixtures.tiny import build_tiny_base, build_tiny_corpus

BENCH = Path(__file__).resolve().parents[1] / "train" / "bench.py"


def test_bench_measures_every_lever_on_the_same_rows(tmp_path):
    base = build_tiny_base(tmp_path / "base")
    corpus = build_tiny_corpus(tmp_path / "corpus", episodes=4)
    configs = ["baseline", "trl-fused-head", "cpu-upper", "packed", "packed-shared", "trl-engine"]
    out = tmp_path / "bench.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--base", str(base), "--corpus", str(corpus), "--rows", "6",
         "--max-length", "4096", "--threads", "1", "--upper-layers", "1", "--configs", *configs,
         "--profile-config", "packed-shared", "--profile-steps", "1", "--epoch-estimate",
         "--json", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    doc = json.loads(out.read_text())
    results = doc["results"]
    assert list(results) == configs, text  # none failed
    loops = [r for name, r in results.items() if name != "trl-engine"]
    assert len({r["tokens"] for r in loops}) == 1  # the same rows everywhere
    # the engine's first step is its warm-up: it times the other batches of the same plan
    assert 0 < results["trl-engine"]["tokens"] < results["baseline"]["tokens"]
    assert doc["ceiling_gflops"]["fp32"] > 0
    for name, res in results.items():
        assert res["tokens_per_s"] > 0 and res["pct_fp32_ceiling"] > 0, name
        assert abs(res["epoch_minutes"] - doc["epoch"]["tokens"] / res["tokens_per_s"] / 60) < 0.1
    assert results["packed"]["steps"] < results["baseline"]["steps"]  # rows share a sequence
    assert results["cpu-upper"]["params"] < results["packed"]["params"]  # one layer's LoRA less
    assert "Self CPU" in doc["profile"]["packed-shared"] and "torch.profiler" in text
    assert doc["epoch"]["rows"] > 0 and "one epoch of" in text
