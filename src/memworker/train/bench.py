"""`python train/bench.py` (this module's thin entry script): the training-speed benchmark: tokens/s and effective FLOP/s of LoRA training steps, against the
machine's measured matmul ceiling (fp32 and bf16), for the configurations it compares, plus the
torch.profiler top-ops table of one configuration and the projected one-epoch time.

    python train/bench.py                                   # default comparison, real rows
    python train/bench.py --configs baseline cpu-profile --rows 48 --threads 2
    python train/bench.py --threads 2 --rows 32 --epoch-estimate --profile-config packed-shared
    python train/bench.py --list                            # what each configuration is

A step is what the trainer does: forward, answer-only loss, backward, AdamW on the LoRA weights.
Every real-row configuration trains on the same rows (`--rows` from `--corpus`, default
data/corpus, train split, seeded order), batched its own way, after one untimed warm-up batch;
so lengths, task mix and answer masks are the real ones and equal across configurations.
`baseline-512` uses 8 random 512-token rows with the last 25 % as answer (the FACTS.md
reference). Each configuration runs in a fresh process, so its peak RSS is its own. Effective
FLOP/s = 4 × parameters × tokens/s (forward 2N, backward to the activations 2N; the frozen base
needs no weight gradients), so a configuration that skips work (answer-only logits, a backward
pass that stops at the upper layers, no padding) shows as more effective FLOP/s: it is the
throughput of the plain computation, not the work done. Tokens are every token of every row
(a shared opening counts once per row). `--epoch-estimate` tokenises the whole train split of
`--corpus` as training does (rows over `--max-length` excluded) and divides its tokens by each
configuration's tokens/s. Thread trap:
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
    upper: bool = False  # LoRA on the top --upper-layers decoder layers only
    packed: bool = False  # rows packed into one sequence (block-diagonal mask), no padding
    trl_head: bool = False  # TRL's fused LM head (the loss SFTTrainer computes by itself)
    engine: bool = False  # the real engine (loop.AnswerOnlySFTTrainer) instead of a bare loop
    dropout: float = 0.05  # lora_dropout (0: no dropout masks are drawn at all)


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
    "trl-fused-head": Setup("logits-only, but the loss from TRL's fused LM head (what "
                            "SFTTrainer computes itself: on CPU it scores every position)",
                            trl_head=True),
    "cpu-upper": Setup("cpu-profile with LoRA on the top --upper-layers layers only (the "
                       "backward pass stops there)", batch=16, max_tokens=2560,
                       logits_only=True, share_prefix=True, upper=True),
    "packed": Setup("up to 16 rows of one task packed into one sequence of at most 2560 "
                    "tokens (block-diagonal mask, no padding, every row's opening computed)", batch=16, max_tokens=2560,
                    logits_only=True, packed=True),
    "packed-shared": Setup("packed, with the rows' common opening once at the start (every row "
                           "attends to it)", batch=16, max_tokens=2560, logits_only=True,
                           share_prefix=True, packed=True),
    "trl-engine": Setup("cpu-profile trained by the real engine (AnswerOnlySFTTrainer: TRL's "
                        "loop, LR schedule, gradient clipping, logging) instead of the bare "
                        "loop; its first step is the untimed warm-up", batch=16,
                        max_tokens=2560, logits_only=True, share_prefix=True, engine=True),
    "packed-shared-upper": Setup("packed-shared with LoRA on the top --upper-layers layers only",
                                 batch=16, max_tokens=2560, logits_only=True, share_prefix=True,
                                 packed=True, upper=True),
    "bf16-nodrop": Setup("bf16 with lora_dropout 0 (no dropout masks drawn)", batch=16,
                         max_tokens=2560, logits_only=True, share_prefix=True, bf16=True,
                         dropout=0.0),
    "upper-bf16": Setup("cpu-upper under bf16 autocast", batch=16, max_tokens=2560,
                        logits_only=True, share_prefix=True, upper=True, bf16=True),
    "upper-bf16-nodrop": Setup("cpu-upper under bf16 autocast with lora_dropout 0 (the cpu "
                               "profile's levers)", batch=16, max_tokens=2560,
                               logits_only=True, share_prefix=True, upper=True, bf16=True,
                               dropout=0.0),
}
DEFAULT = ("baseline", "logits-only", "trl-fused-head", "cpu-profile", "trl-engine", "cpu-upper",
           "packed", "packed-shared", "packed-shared-upper")


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


def load(base, setup: Setup, threads: int, upper_layers: int):
    """The model exactly as train/run.py builds it (memworker.train.model.load_model)."""
    from memworker.train.config import StageConfig
    from memworker.train.model import Device, count_params, load_model

    layers = f"upper:{upper_layers}" if setup.upper else "all"
    cfg = StageConfig(name="bench", qlora=setup.qlora, lora_layers=layers,
                      lora_dropout=setup.dropout)
    model = load_model(base, cfg, Device("cpu", setup.bf16, threads, 0, 1))
    if setup.trl_head:
        from trl.trainer.utils import add_fused_lm_head

        add_fused_lm_head(model.get_base_model())
    model.train()
    return model, count_params(model)["total"]


def step_loss(model, batch: dict, setup: Setup):
    """Summed answer-token cross-entropy of one batch, the way `setup` computes it."""
    if setup.trl_head:
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    labels=batch["labels"], fused_lm_head=True)
        return -out.log_probs.sum()
    return answer_loss(model, batch, setup.logits_only)[0]


def row_tokens(batch: dict) -> int:
    """Every token of every row in a batch (padded, shared-prefix or packed)."""
    if "num_tokens" in batch:
        return int(batch["num_tokens"])
    return int(batch["attention_mask"].sum())


def batches(setup: Setup, encoded: list, seed: int) -> list[dict]:
    """The same rows for every real-row configuration, batched the way that configuration
    trains (batch 1, or data.TaskBatchSampler: one task per batch, similar lengths)."""
    collate = tdata.PadCollator(pad_id=0, share_prefix=setup.share_prefix)
    if setup.packed:
        collate = tdata.PackCollator(share_prefix=setup.share_prefix)
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
    plan = tdata.TaskBatchSampler([tdata.batch_group(e) for e in encoded], [len(e.input_ids) for e in encoded],
                                  setup.batch, seed, setup.max_tokens, packed=setup.packed)
    return [collate([rows[i] for i in b]) for b in plan]


def train_step(model, opt, batch: dict, setup: Setup) -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=setup.bf16):
        loss = step_loss(model, batch, setup)
        n = batch["labels"][:, 1:].ne(tdata.IGNORE).sum()
    (loss / n).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def run(setup: Setup, base, encoded, seed: int, threads: int, upper_layers: int,
        profile_steps: int = 0) -> dict:
    """Train once on the first batch (warm-up, untimed), then time one pass over all batches;
    with `profile_steps`, then print torch.profiler's top operators over that many more steps."""
    torch.manual_seed(seed)
    model, params = load(base, setup, threads, upper_layers)
    if setup.engine:
        return engine_run(model, params, setup, base, encoded, seed, threads)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    work = batches(setup, encoded, seed)
    times, tokens = [], []
    for i, batch in enumerate([work[0], *work]):
        t0 = time.perf_counter()
        train_step(model, opt, batch, setup)
        if i > 0:
            times.append(time.perf_counter() - t0)
            tokens.append(row_tokens(batch))  # every token of every row
    if profile_steps:
        print(profile_table(model, opt, work[:profile_steps], setup), flush=True)
    del model, opt
    gc.collect()
    return summary(times, tokens, params)


def engine_run(model, params: int, setup: Setup, base, encoded, seed: int,
               threads: int) -> dict:
    """One pass over the same batches through memworker.train.loop's TRL trainer; the first
    step is the warm-up, the others are timed from step begin to step end."""
    import tempfile

    from transformers import TrainerCallback

    from memworker.train import loop
    from memworker.train.config import StageConfig
    from memworker.train.model import Device, load_tokenizer

    cfg = StageConfig(name="bench", qlora=setup.qlora, batch_size=setup.batch,
                      max_batch_tokens=setup.max_tokens, share_prefix=setup.share_prefix,
                      answer_logits_only=setup.logits_only, grad_accum=1, max_steps=1,
                      eval_steps=10**6, save_steps=10**6, logging_steps=10**6, seed=seed,
                      warmup=0.0)
    sampler = loop.make_batch_sampler(cfg, encoded)
    cfg.max_steps = len(sampler) if sampler is not None else len(encoded)
    tokenizer = load_tokenizer(base.path)
    collate = loop.make_collator(cfg, tokenizer.pad_token_id)
    seen: list[int] = []

    def counting(features):
        batch = collate(features)
        seen.append(row_tokens(batch))
        return batch

    class Clock(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self.t0)

    clock = Clock()
    with tempfile.TemporaryDirectory() as out:
        trainer = loop.AnswerOnlySFTTrainer(
            model=model, args=loop.training_args(cfg, Device("cpu", setup.bf16, threads, 0, 1), out),
            train_dataset=tdata.to_dataset(encoded), eval_dataset=tdata.to_dataset(encoded[:1]),
            processing_class=tokenizer, data_collator=counting, callbacks=[clock],
            answer_logits_only=cfg.answer_logits_only, batch_sampler=sampler)
        trainer.args.disable_tqdm = True
        trainer.train()
    times, tokens = clock.times[1:], seen[1:len(clock.times)]
    if not times:
        raise SystemExit("trl-engine: one batch only, nothing left to time after the warm-up; "
                         "raise --rows")
    return summary(times, tokens, params)


def summary(times: list[float], tokens: list[int], params: int) -> dict:
    tps = sum(tokens) / sum(times)
    peak = report.max_rss_bytes()
    return {"tokens_per_s": round(tps, 1), "s_per_step": round(sum(times) / len(times), 3),
            "peak_rss_gb": round(peak / 2**30, 2), "steps": len(times),
            "tokens_per_step": round(sum(tokens) / len(tokens), 1), "tokens": sum(tokens),
            "s_per_1k_tokens": round(1000 / tps, 2),
            "effective_gflops": round(4 * params * tps / 1e9, 1), "params": params}


def profile_table(model, opt, work: list[dict], setup: Setup, rows: int = 20) -> str:
    """torch.profiler's operators by self CPU time over the given training steps."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in work:
            train_step(model, opt, batch, setup)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def split_tokens(args: argparse.Namespace) -> dict:
    """Rows and tokens of the train split of --corpus as training counts them (answer-only
    encoding, rows over --max-length excluded), for the one-epoch estimate."""
    from memworker import registry
    from memworker.train.model import load_tokenizer

    base = registry.prepare(args.base)
    rows = tdata.load_wire_rows(args.corpus, "train")
    _, stats = tdata.encode_rows(load_tokenizer(base.path), rows, args.max_length,
                                 base.model.end_of_turn)
    return {"rows": stats.rows, "tokens": stats.tokens, "excluded": dict(stats.excluded),
            "max_length": args.max_length}


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
    profile_steps = args.profile_steps if name == args.profile_config else 0
    return run(CONFIGS[name], base, encoded, args.seed, args.threads, args.upper_layers,
               profile_steps)


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
    parser.add_argument("--upper-layers", type=int, default=8,
                        help="decoder layers that get LoRA in the *-upper configurations (the "
                        "top N; lora_layers: upper:N in a stage config)")
    parser.add_argument("--profile-config", choices=list(CONFIGS),
                        help="print torch.profiler's top operators of this configuration "
                        "(after its timed pass, so its figures are unaffected)")
    parser.add_argument("--profile-steps", type=int, default=3,
                        help="training steps the profiler records")
    parser.add_argument("--epoch-estimate", action="store_true",
                        help="project each configuration's time for one epoch of the train "
                        "split of --corpus (its tokens as training counts them / tokens/s)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one configuration
    args = parser.parse_args(argv)
    args.threads = args.threads or len(os.sched_getaffinity(0))
    if args.list:
        for name, setup in CONFIGS.items():
            print(f"{name:20s} {setup.help}")
        return 0
    if args.one:
        print("RESULT " + json.dumps(measure_one(args, args.one)), flush=True)
        return 0
    if args.profile_config and CONFIGS[args.profile_config].engine:
        parser.error("--profile-config profiles the bare loop; pick a configuration other "
                     "than trl-engine")
    if args.profile_config and args.profile_config not in args.configs:
        args.configs.append(args.profile_config)
    torch.set_num_threads(args.threads)
    ceiling = {"fp32": round(matmul_ceiling(torch.float32), 1),
               "bf16": round(matmul_ceiling(torch.bfloat16, 0.5), 1)}
    print(f"machine: {platform.processor() or platform.machine()}, {args.threads} threads, "
          f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}); matmul "
          f"ceiling fp32 {ceiling['fp32']} GFLOP/s, bf16 {ceiling['bf16']} GFLOP/s")
    print(f"{'config':20s} {'tok/s':>7s} {'s/step':>7s} {'tok/step':>8s} {'eff GFLOP/s':>11s} "
          f"{'% fp32 ceiling':>14s} {'peak RSS GB':>11s}")
    results = {}
    passthrough = ["--base", args.base, "--corpus", args.corpus, "--max-length",
                   str(args.max_length), "--rows", str(args.rows),
                   "--threads", str(args.threads), "--seed", str(args.seed),
                   "--upper-layers", str(args.upper_layers), "--profile-steps",
                   str(args.profile_steps)]
    if args.profile_config:
        passthrough += ["--profile-config", args.profile_config]
    tables = {}
    for name in args.configs:
        proc = subprocess.run([sys.executable, "-m", "memworker.train.bench", "--one", name,
                               *passthrough],
                              capture_output=True, text=True)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            print(f"{name:20s} failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        if name == args.profile_config:
            tables[name] = proc.stdout[:proc.stdout.index("RESULT ")].strip()
        res = results[name] = json.loads(line[len("RESULT "):])
        res["pct_fp32_ceiling"] = round(100 * res["effective_gflops"] / ceiling["fp32"], 1)
        print(f"{name:20s} {res['tokens_per_s']:7.1f} {res['s_per_step']:7.2f} "
              f"{res['tokens_per_step']:8.0f} {res['effective_gflops']:11.1f} "
              f"{res['pct_fp32_ceiling']:14.1f} {res['peak_rss_gb']:11.1f}", flush=True)
    if "baseline" in results:
        ref = results["baseline"]["tokens_per_s"]
        print("speed-up over baseline: " + ", ".join(
            f"{k} {v['tokens_per_s'] / ref:.2f}x" for k, v in results.items()))
    for name, table in tables.items():
        print(f"\ntorch.profiler, {name}, {args.profile_steps} steps after the timed pass "
              f"(operators by self CPU time):\n{table}")
    epoch = split_tokens(args) if args.epoch_estimate else None
    if epoch:
        print(f"\none epoch of {args.corpus} train: {epoch['rows']} rows, {epoch['tokens']} "
              f"tokens (max_length {epoch['max_length']}, excluded {epoch['excluded'] or 'none'})")
        for name, res in results.items():
            res["epoch_minutes"] = round(epoch["tokens"] / res["tokens_per_s"] / 60, 1)
            print(f"  {name:20s} {res['epoch_minutes']:7.1f} min at {res['tokens_per_s']} tok/s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"threads": args.threads, "ceiling_gflops": ceiling, "results": results,
                       "rows": args.rows, "max_length": args.max_length,
                       "upper_layers": args.upper_layers, "epoch": epoch,
                       "profile": tables}, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
