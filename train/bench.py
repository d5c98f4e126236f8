"""Training-speed benchmark: tokens/s and effective FLOP/s of LoRA training steps, against the
machine's measured matmul ceiling (fp32 and bf16), for the configurations it compares.

    python train/bench.py                                   # default comparison, real rows
    python train/bench.py --configs baseline cpu-profile --rows 48 --threads 2
    python train/bench.py --list                            # what each configuration is

A step is what the trainer does: forward, answer-only loss, backward, AdamW on the LoRA weights.
Every real-row configuration trains on the same rows (`--rows` from `--corpus`, default
data/corpus, train split, seeded order), batched its own way, after one untimed warm-up batch;
so lengths, task mix and answer masks are the real ones and equal across configurations.
`baseline-512` uses 8 random 512-token rows with the last 25 % as answer (the FACTS.md
reference). Each configuration runs in a fresh process, so its peak RSS is its own. Effective FLOP/s = 4 × parameters × tokens/s
(forward 2N, backward to the activations 2N; the frozen base needs no weight gradients), so a
configuration that skips work (answer-only logits) shows as more effective FLOP/s. Thread trap:
run it with OMP_WAIT_POLICY=PASSIVE on a shared machine (importing memworker sets it by default).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass

import memworker

# importing memworker set the OpenMP wait policy; torch's OpenMP reads it when torch loads
assert "OMP_WAIT_POLICY" in os.environ, memworker.__file__

import torch  # noqa: E402

from memworker.train import data as tdata  # noqa: E402
from memworker.train import report  # noqa: E402
from memworker.train.loop import answer_loss  # noqa: E402


@dataclass(frozen=True)
class Setup:
    help: str
    rows: str = "real"  # "real" corpus rows or "random" 512-token rows
    batch: int = 1
    max_tokens: int = 0
    share_prefix: bool = False
    logits_only: bool = False
    qlora: bool = False
    bf16: bool = False


CONFIGS = {
    "baseline-512": Setup("FACTS.md reference: LoRA fp32, full logits, batch 1, random 512-token "
                          "rows", rows="random"),
    "baseline": Setup("LoRA fp32, full logits, batch 1, real rows (the speed before this work)"),
    "logits-only": Setup("+ vocabulary logits only at answer positions", logits_only=True),
    "grouped-b4": Setup("+ batches of 4 rows of one task and similar length", batch=4,
                        logits_only=True),
    "shared-b4": Setup("+ their common prompt opening run once per batch (KV-cache prefix)",
                       batch=4, logits_only=True, share_prefix=True),
    "shared-b8": Setup("the same with batches of 8 (no token bound: up to ~22 GB)", batch=8,
                       logits_only=True, share_prefix=True),
    "cpu-profile": Setup("what `--profile cpu` trains with: up to 16 rows of one task, at most "
                         "2560 padded tokens per batch (bounded memory), all of the above",
                         batch=16, max_tokens=2560, logits_only=True, share_prefix=True),
    "qlora": Setup("cpu-profile with the NF4 QLoRA base instead of fp32", batch=16,
                   max_tokens=2560, logits_only=True, share_prefix=True, qlora=True),
    "bf16": Setup("cpu-profile under bf16 autocast (fast only with native CPU bf16)", batch=16,
                  max_tokens=2560, logits_only=True, share_prefix=True, bf16=True),
}
DEFAULT = ("baseline-512", "baseline", "logits-only", "grouped-b4", "shared-b4", "cpu-profile",
           "qlora")


def matmul_ceiling(dtype: torch.dtype, seconds: float = 1.5) -> float:
    """Best GFLOP/s of a 1024 x 1024 x 1024 matmul at the current thread count."""
    a, b = torch.randn(1024, 1024, dtype=dtype), torch.randn(1024, 1024, dtype=dtype)
    a @ b
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        a @ b
        best = max(best, 2 * 1024**3 / (time.perf_counter() - t0) / 1e9)
    return best


def load(base, setup: Setup, threads: int):
    """The model exactly as train/run.py builds it (memworker.train.model.load_model)."""
    from memworker.train.config import StageConfig
    from memworker.train.model import Device, count_params, load_model

    cfg = StageConfig(name="bench", qlora=setup.qlora)
    model = load_model(base, cfg, Device("cpu", setup.bf16, threads, 0, 1))
    model.train()
    return model, count_params(model)["total"]


def batches(setup: Setup, encoded: list, seed: int) -> list[dict]:
    """The same rows for every real-row configuration, batched the way that configuration
    trains (batch 1, or data.TaskBatchSampler: one task per batch, similar lengths)."""
    collate = tdata.PadCollator(pad_id=0, share_prefix=setup.share_prefix)
    if setup.rows == "random":
        g = torch.Generator().manual_seed(seed)
        out = []
        for _ in range(8):
            ids = torch.randint(10, 40000, (512,), generator=g).tolist()
            out.append(collate([{"input_ids": ids, "labels": [-100] * 384 + ids[384:]}]))
        return out
    rows = [{"input_ids": e.input_ids, "labels": e.labels} for e in encoded]
    if setup.batch == 1:
        return [collate([r]) for r in rows]
    plan = tdata.TaskBatchSampler([e.group for e in encoded], [len(e.input_ids) for e in encoded],
                                  setup.batch, seed, setup.max_tokens)
    return [collate([rows[i] for i in b]) for b in plan]


def run(setup: Setup, base, encoded, seed: int, threads: int) -> dict:
    """Train once on the first batch (warm-up, untimed), then time one pass over all batches."""
    torch.manual_seed(seed)
    model, params = load(base, setup, threads)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    work = batches(setup, encoded, seed)
    times, tokens = [], []
    for i, batch in enumerate([work[0], *work]):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=setup.bf16):
            loss, _ = answer_loss(model, batch, setup.logits_only)
            n = batch["labels"][:, 1:].ne(tdata.IGNORE).sum()
        (loss / n).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i > 0:
            times.append(time.perf_counter() - t0)
            tokens.append(int(batch["attention_mask"].sum()))  # every token of every row
    del model, opt
    gc.collect()
    tps = sum(tokens) / sum(times)
    peak = report.max_rss_bytes()
    return {"tokens_per_s": round(tps, 1), "s_per_step": round(sum(times) / len(times), 3),
            "peak_rss_gb": round(peak / 2**30, 2), "steps": len(times),
            "tokens_per_step": round(sum(tokens) / len(tokens), 1), "tokens": sum(tokens),
            "s_per_1k_tokens": round(1000 / tps, 2),
            "effective_gflops": round(4 * params * tps / 1e9, 1), "params": params}


def measure_one(args: argparse.Namespace, name: str) -> dict:
    """One configuration in this process (called in a fresh process per configuration, so that
    each peak RSS is its own)."""
    from memworker import registry
    from memworker.train.model import load_tokenizer

    torch.set_num_threads(args.threads)
    base = registry.prepare(args.base)
    encoded = []
    if CONFIGS[name].rows == "real":
        rows = tdata.seeded_order(tdata.load_wire_rows(args.corpus, "train"), args.seed, "bench")
        encoded, _ = tdata.encode_rows(load_tokenizer(base.path), rows[: args.rows],
                                       args.max_length, base.model.end_of_turn)
    return run(CONFIGS[name], base, encoded, args.seed, args.threads)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(DEFAULT), choices=list(CONFIGS))
    parser.add_argument("--base", default="smollm2-135m", help="registry key or HF folder")
    parser.add_argument("--corpus", default="data/corpus")
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--rows", type=int, default=24,
                        help="corpus rows every real-row configuration trains on (same rows)")
    parser.add_argument("--threads", type=int, default=0, help="0: the usable cores")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one configuration
    args = parser.parse_args(argv)
    args.threads = args.threads or len(os.sched_getaffinity(0))
    if args.list:
        for name, setup in CONFIGS.items():
            print(f"{name:14s} {setup.help}")
        return 0
    if args.one:
        print("RESULT " + json.dumps(measure_one(args, args.one)), flush=True)
        return 0
    torch.set_num_threads(args.threads)
    ceiling = {"fp32": round(matmul_ceiling(torch.float32), 1),
               "bf16": round(matmul_ceiling(torch.bfloat16, 0.5), 1)}
    print(f"machine: {platform.processor() or platform.machine()}, {args.threads} threads, "
          f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}); matmul "
          f"ceiling fp32 {ceiling['fp32']} GFLOP/s, bf16 {ceiling['bf16']} GFLOP/s")
    print(f"{'config':14s} {'tok/s':>7s} {'s/step':>7s} {'tok/step':>8s} {'eff GFLOP/s':>11s} "
          f"{'% fp32 ceiling':>14s} {'peak RSS GB':>11s}")
    results = {}
    passthrough = ["--base", args.base, "--corpus", args.corpus, "--max-length",
                   str(args.max_length), "--rows", str(args.rows),
                   "--threads", str(args.threads), "--seed", str(args.seed)]
    for name in args.configs:
        proc = subprocess.run([sys.executable, __file__, "--one", name, *passthrough],
                              capture_output=True, text=True)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            print(f"{name:14s} failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        res = results[name] = json.loads(line[len("RESULT "):])
        res["pct_fp32_ceiling"] = round(100 * res["effective_gflops"] / ceiling["fp32"], 1)
        print(f"{name:14s} {res['tokens_per_s']:7.1f} {res['s_per_step']:7.2f} "
              f"{res['tokens_per_step']:8.0f} {res['effective_gflops']:11.1f} "
              f"{res['pct_fp32_ceiling']:14.1f} {res['peak_rss_gb']:11.1f}", flush=True)
    if "baseline" in results:
        ref = results["baseline"]["tokens_per_s"]
        print("speed-up over baseline: " + ", ".join(
            f"{k} {v['tokens_per_s'] / ref:.2f}x" for k, v in results.items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"threads": args.threads, "ceiling_gflops": ceiling, "results": results,
                       "rows": args.rows,
                       "max_length": args.max_length}, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
