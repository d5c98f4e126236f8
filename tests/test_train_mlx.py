"""The Apple path: wire rows → mlx-lm chat JSONL + the exact `mlx_lm lora` command, masked like
the torch path; a real (slow) mlx-lm run on the tiny model where `mlx[cpu]` is installed."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from memworker import pipeline
from memworker.hashing import read_jsonl
from memworker.prompts import system_prompt
from memworker.train import data as tdata
from memworker.train.mlx_lora import loss_logger, read_losses

ARGS = ["--backend", "mlx", "--receipts-dir", "", "--no-build-corpus", "--max-steps", "2",
        "--grad-accum", "1", "--val-rows", "3", "--logging-steps", "1"]


def test_export_writes_chat_rows_and_the_exact_command(work, assets):
    assert pipeline.main(["--stage", "coding", "--base", str(assets["base"]), *ARGS,
                     "--max-length", "900", "--mlx-export-only"]) == 0
    run = Path("runs/coding")
    rows = read_jsonl(run / "mlx-data" / "train.jsonl")
    assert rows and all(set(r) == {"messages"} for r in rows)
    assert all(r["messages"][0] == {"role": "system", "content": system_prompt()} for r in rows)
    assert all(r["messages"][-1]["role"] == "assistant" for r in rows)
    assert len(read_jsonl(run / "mlx-data" / "valid.jsonl")) <= 3
    cmd = shlex.split((run / "mlx-command.txt").read_text())
    assert cmd[1:3] == ["-m", "memworker.train.mlx_lora"]
    assert cmd[cmd.index("--loss-log") + 1] == str(run / "mlx-losses.jsonl")
    for flag, value in (("--mask-prompt", None), ("--iters", "2"), ("--max-seq-length", "900"),
                        ("--num-layers", "-1"), ("--seed", "13"), ("--data", str(run / "mlx-data"))):
        assert flag in cmd and (value is None or cmd[cmd.index(flag) + 1] == value)
    lora = (run / "mlx-lora.yaml").read_text()
    assert "rank: 16" in lora and "scale: 2.0" in lora and "dropout: 0.05" in lora


def test_mlx_masks_the_same_prompt_tokens(assets, mlx_lm):
    from mlx_lm.tuner.datasets import ChatDataset
    from transformers import AutoTokenizer

    from memworker.corpus import load_rows

    tok = AutoTokenizer.from_pretrained(assets["base"])
    rows = load_rows(assets["coding"], "train")[:4]
    dataset = ChatDataset([{"messages": r["messages"]} for r in rows], tok, mask_prompt=True)
    for i, row in enumerate(rows):
        tokens, offset = dataset.process(dataset[i])
        ours = tdata.encode_chat(tok, row["messages"], 4096, "<|im_end|>")
        first_label = next(j for j, x in enumerate(ours.labels) if x != tdata.IGNORE)
        assert offset == first_label
        assert list(tokens[: len(ours.input_ids)]) == ours.input_ids


def test_mlx_loss_reports_are_logged_by_its_training_callback(tmp_path, mlx_lm):
    """The callback is mlx-lm's own TrainingCallback; reports land in JSON lines, read back."""
    from mlx_lm.tuner.callbacks import TrainingCallback

    path = tmp_path / "losses.jsonl"
    logger = loss_logger(path)
    assert isinstance(logger, TrainingCallback)
    logger.on_val_loss_report({"iteration": 0, "val_loss": 6.415, "val_time": 1.62})
    logger.on_train_loss_report({"iteration": 1, "train_loss": 6.412, "learning_rate": 2e-4,
                                 "iterations_per_second": 1.0, "tokens_per_second": 200.0,
                                 "trained_tokens": 7, "peak_memory": 0.2})
    logger.on_train_loss_report({"iteration": 2, "train_loss": 6.355, "learning_rate": 2e-4,
                                 "iterations_per_second": 1.0, "tokens_per_second": 200.0,
                                 "trained_tokens": 60, "peak_memory": 0.2})
    assert read_losses(path) == ([(1, 6.412), (2, 6.355)], [(0, 6.415)])


@pytest.mark.slow
def test_mlx_lora_trains_the_tiny_model(work, assets, mlx_lm):
    assert pipeline.main(["--stage", "coding", "--base", str(assets["base"]), *ARGS]) == 0
    receipt = json.loads(Path("runs/coding/receipt.json").read_text())
    assert receipt["backend"] == "mlx" and receipt["result"]["global_step"] == 2
    assert receipt["result"]["final_train_loss"] > 0 and receipt["result"]["val_loss"] > 0
    train_curve, val_curve = read_losses("runs/coding/mlx-losses.jsonl")  # the callback's log
    assert receipt["result"]["final_train_loss"] == train_curve[-1][1]
    assert receipt["result"]["val_loss"] == val_curve[-1][1]
    assert "adapters.safetensors" in receipt["adapter"]["files"]
    # the next stage warm-starts from the mlx adapter
    assert pipeline.main(["--stage", "general-a", "--base", str(assets["base"]), *ARGS]) == 0
    child = json.loads(Path("runs/general-a/receipt.json").read_text())
    assert "--resume-adapter-file" in child["mlx"]["command"]
