"""The Apple path: the same wire rows, trained with mlx-lm's LoRA instead of torch.

Export format: chat JSONL (`{"messages": [system, user, assistant]}`) in `<run>/mlx-data/
{train,valid}.jsonl`, trained with `--mask-prompt`. mlx-lm then masks exactly
`apply_chat_template(messages[:-1], add_generation_prompt=True)`, the prefix our torch path masks.
(Its prompt/completion format is not used: it rebuilds the chat as [user, assistant] and drops
our system prompt, and SmolLM2's template would then inject its own.) Rows longer than
max_length are excluded and counted here, so mlx-lm never truncates one.

The exact command is written to `<run>/mlx-command.txt` and into the receipt, e.g.:

    python -m memworker.train.mlx_lora --model ~/.cache/memworker/bases/smollm2-135m --train \\
        --data runs/coding/mlx-data --adapter-path runs/coding/adapter -c runs/coding/mlx-lora.yaml \\
        --fine-tune-type lora --mask-prompt --num-layers -1 --batch-size 1 \\
        --grad-accumulation-steps 8 --iters 2400 --learning-rate 0.0002 --max-seq-length 4096 \\
        --val-batches -1 --steps-per-eval 800 --steps-per-report 40 --save-every 400 --seed 13 \\
        --loss-log runs/coding/mlx-losses.jsonl

`memworker.train.mlx_lora` is mlx-lm's own LoRA trainer with its training callback writing the
loss reports to `--loss-log` (JSON lines); the receipt's losses come from there.

Differences from the torch path, recorded in the receipt: plain LoRA on the 16/32-bit base (no
NF4), no resume from a mid-run checkpoint (a rerun restarts the stage), and the tokens mlx-lm
trains on include the newline its chat template puts after `<|im_end|>`.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from memworker import receipts
from memworker.hashing import write_jsonl
from memworker.registry import PreparedBase
from memworker.train import data as tdata
from memworker.train import report
from memworker.train.config import StageConfig
from memworker.train.loop import RunError, RunRequest, check_parent, prepare_data, receipt_core
from memworker.train.mlx_lora import read_losses
from memworker.train.model import load_tokenizer


def mlx_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("mlx_lm") is not None


def export_split(rows: list[dict], tokenizer, cfg: StageConfig, end_of_turn: str,
                 path: Path) -> tuple[tdata.SplitStats, str]:
    """Write the rows that fit max_length as chat JSONL; (stats, file sha256)."""
    encoded, stats = tdata.encode_rows(tokenizer, rows, cfg.max_length, end_of_turn)
    return stats, write_jsonl(path, ({"messages": rows[e.source]["messages"]} for e in encoded))


def iterations(cfg: StageConfig, n_train: int) -> int:
    """mlx-lm counts micro-batches; our steps are optimizer steps."""
    steps = cfg.max_steps if cfg.max_steps > 0 else math.ceil(
        cfg.epochs * n_train / (cfg.batch_size * cfg.grad_accum))
    return max(1, steps) * cfg.grad_accum


def lora_yaml(cfg: StageConfig, iters: int) -> dict[str, Any]:
    warm = int(cfg.warmup * iters) if cfg.warmup < 1 else int(cfg.warmup) * cfg.grad_accum
    doc: dict[str, Any] = {"lora_parameters": {"rank": cfg.lora_r,
                                               "scale": cfg.lora_alpha / cfg.lora_r,
                                               "dropout": cfg.lora_dropout}}
    if cfg.lr_scheduler == "cosine":
        doc["lr_schedule"] = {"name": "cosine_decay",
                              "arguments": [cfg.learning_rate, max(1, iters - warm), 0.0],
                              "warmup": warm}
    return doc


def num_layers(cfg: StageConfig) -> str:
    """mlx-lm's --num-layers: LoRA on the last N layers (-1: all), i.e. `lora_layers`."""
    return "-1" if cfg.lora_layers == "all" else cfg.lora_layers.split(":", 1)[1]


def command(cfg: StageConfig, model_path: Path, data_dir: Path, adapter_dir: Path,
            config_path: Path, iters: int, resume_file: Path | None,
            loss_log: Path) -> list[str]:
    every = cfg.grad_accum
    cmd = [sys.executable, "-m", "memworker.train.mlx_lora", "--model", str(model_path), "--train",
           "--data", str(data_dir), "--adapter-path", str(adapter_dir), "-c", str(config_path),
           "--fine-tune-type", "lora", "--mask-prompt", "--num-layers", num_layers(cfg),
           "--batch-size", str(cfg.batch_size), "--grad-accumulation-steps", str(cfg.grad_accum),
           "--iters", str(iters), "--learning-rate", str(cfg.learning_rate),
           "--max-seq-length", str(cfg.max_length), "--val-batches", "-1",
           "--steps-per-eval", str(min(iters, cfg.eval_steps * every)),
           "--steps-per-report", str(min(iters, cfg.logging_steps * every)),
           "--save-every", str(min(iters, cfg.save_steps * every)), "--seed", str(cfg.seed),
           "--loss-log", str(loss_log)]
    if resume_file is not None:
        cmd += ["--resume-adapter-file", str(resume_file)]
    return cmd


def run_mlx(req: RunRequest, base: PreparedBase, execute: bool = True) -> dict[str, Any]:
    """Export the data, write the command, run it (unless `execute` is False), write a receipt."""
    cfg, paths = req.cfg, req.paths
    parent = check_parent(req, base)
    if parent[0] is not None and parent[0].get("backend") != "mlx":
        raise RunError(f"{paths.parent_dir} was trained with torch; the mlx path warm-starts "
                       "only from an mlx adapter: rerun the parent with --backend mlx")
    if cfg.task_shares:
        raise RunError(f"stage {cfg.name}: task_shares weighs the loss of the torch path; "
                       "mlx-lm trains with its own loss: drop --task-shares or use the torch path")
    if req.fresh and paths.run_dir.exists():
        shutil.rmtree(paths.run_dir)
    rows = prepare_data(cfg)
    tokenizer = load_tokenizer(base.path)
    data_dir = paths.run_dir / "mlx-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    eot = base.model.end_of_turn
    train_stats, train_sha = export_split(rows["train"], tokenizer, cfg, eot, data_dir / "train.jsonl")
    val_stats, val_sha = export_split(rows["val"], tokenizer, cfg, eot, data_dir / "valid.jsonl")
    if not train_stats.rows or not val_stats.rows:
        raise RunError(f"stage {cfg.name}: no rows fit max_length={cfg.max_length}")
    iters = iterations(cfg, train_stats.rows)
    config_path = paths.run_dir / "mlx-lora.yaml"
    config_path.write_text(yaml.safe_dump(lora_yaml(cfg, iters), sort_keys=True), "utf-8")
    adapter_dir = paths.run_dir / receipts.ADAPTER_DIR
    resume = (paths.parent_dir / receipts.ADAPTER_DIR / "adapters.safetensors" if cfg.parent
              else None)
    loss_log = paths.run_dir / "mlx-losses.jsonl"
    cmd = command(cfg, base.path, data_dir, adapter_dir, config_path, iters, resume, loss_log)
    (paths.run_dir / "mlx-command.txt").write_text(shlex.join(cmd) + "\n", "utf-8")
    print(f"train: mlx command written to {paths.run_dir / 'mlx-command.txt'}")
    if not execute:
        return {"command": shlex.join(cmd)}
    if not mlx_available():
        raise RunError("the mlx path needs mlx-lm: pip install mlx-lm (Apple silicon) or "
                       "'mlx[cpu]' mlx-lm (Linux, slow)")
    t0 = time.time()
    log_path = paths.run_dir / "mlx.log"
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "NO_COLOR": "1"})
        for line in proc.stdout:  # stream it: mlx-lm prints its own progress
            sys.stdout.write(line)
            log.write(line)
        code = proc.wait()
    runtime = time.time() - t0
    if code != 0:
        raise RunError(f"mlx_lm lora exited with {code}; see {log_path}")
    train_curve, val_curve = read_losses(loss_log)
    history = ([{"step": s, "loss": v} for s, v in train_curve]
               + [{"step": s, "eval_loss": v} for s, v in val_curve])
    report.loss_curve(history, paths.run_dir / "loss.png", f"{cfg.name} on {base.model.key} (mlx)")
    tokens = train_stats.tokens * iters / max(1, train_stats.rows) * cfg.batch_size
    receipt = {
        **receipt_core(req, base, parent, rows, train_stats, val_stats),
        "backend": "mlx",
        "mlx": {"command": shlex.join(cmd), "iterations": iters,
                "differences": ["LoRA on the unquantized base (no NF4)",
                                "no mid-run resume", "trailing newline after <|im_end|> trained"],
                "log_sha256": report.file_sha(log_path)},
        "result": {"global_step": iters // cfg.grad_accum, "runtime_s": round(runtime, 2),
                   "s_per_step": round(runtime / (iters / cfg.grad_accum), 3),
                   "tokens_per_s_estimate": round(tokens / runtime, 1),
                   "final_train_loss": train_curve[-1][1] if train_curve else None,
                   "val_loss": val_curve[-1][1] if val_curve else None},
        "memory_peak": report.peak_memory(children=True),
    }
    receipt["data"]["mlx_export_sha256"] = {"train": train_sha, "valid": val_sha}
    receipts.write_receipt(receipt, paths.run_dir, paths.receipts_dir, cfg.name)
    return receipt
