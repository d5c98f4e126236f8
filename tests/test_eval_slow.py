"""Slow: a real model arm (the embedded base GGUF through llama.cpp) and the LLM judge against a
real `python -m llama_cpp.server` on 127.0.0.1."""

from __future__ import annotations

import json

import pytest

from memworker.eval import runner
from memworker.eval.cli import main
from memworker.eval.judge import JUDGE_FILE, run_judge
from memworker.registry import embedded_gguf_path

pytestmark = pytest.mark.slow


def test_gguf_arm_end_to_end(tiny_corpus, tmp_path):
    gguf = embedded_gguf_path()
    out = tmp_path / "run"
    assert main(["--arm", f"base={gguf}", "--arm", "rules", "--set", "test", "--corpus",
                 str(tiny_corpus), "--out", str(out), "--limit", "3", "--n-ctx", "2048",
                 "--threads", "2", "--max-tokens", "256", "--resamples", "100",
                 "--no-plots"]) == 0
    samples = [s for s in runner.read_samples(out / runner.SAMPLES) if s["arm"] == "base"]
    assert len(samples) == 3 and {s["task"] for s in samples} == {"extract", "consolidate",
                                                                    "reflect"}
    for s in samples:
        assert s["attempts"] and all(isinstance(a["raw"], str) for a in s["attempts"])
        assert s["attempts"][0]["completion_tokens"] and s["seconds"] > 0
        assert (s["status"] == "failed") == (s["output"] is None)
        assert len(s["attempts"]) == (1 if s["status"] == "first_try" else 2)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["gguf"]["base"]["sha256"] and summary["speed"]["base"]["rows_per_s"]
    prompts = {s["id"]: s["prompt_sha256"] for s in runner.read_samples(out / runner.SAMPLES)
               if s["arm"] == "rules"}
    assert prompts == {s["id"]: s["prompt_sha256"] for s in samples}   # same prompts per arm


def test_judge_against_a_real_llama_cpp_server(tiny_corpus, tmp_path, llama_server):
    rows = runner.load_eval_rows(tiny_corpus, "test")[:3]
    samples = [{"arm": "gold", "id": r["id"], "output": r["gold"]} for r in rows]
    samples.append({"arm": "gold", "id": "x", "output": None})
    section = run_judge(llama_server + "/v1", "smollm2", rows, samples, tmp_path, seed=1)
    arm = section["arms"]["gold"]
    assert arm["rows"] == 4 and arm["judged"] == 3
    assert arm["same"] + arm["different"] + arm["unparsed"] == 3
    lines = (tmp_path / JUDGE_FILE).read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(x)["raw"] for x in lines)
    again = run_judge(llama_server + "/v1", "smollm2", rows, samples, tmp_path, seed=1)   # resumes
    assert again["arms"] == section["arms"]
    assert len((tmp_path / JUDGE_FILE).read_text().splitlines()) == 3
