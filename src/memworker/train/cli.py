"""`python train/run.py`: resolve the stage config, build a missing corpus, run missing parent
stages first, then train the stage (torch, or mlx-lm on Apple silicon) and print its receipt."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from memworker import registry
from memworker.train import config as tconfig
from memworker.train import data as tdata
from memworker.train.lineage import RECEIPT, LineageError, MissingParent

EXPECTED = (tconfig.ConfigError, tdata.DataError, LineageError, registry.BaseUnavailable)
EVAL_SET = "heldout"
# The same cap on every attempt of every arm (the base otherwise writes thousands of tokens). It
# must stay above the longest gold answer: corpus v2's extract answers run to 858 tokens in the
# general train split (median 571; 60 % are over 512), so a 512 cap cut off most correct answers
# (tests/test_eval_cap.py measures generated rows against it).
EVAL_MAX_TOKENS = 1024


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python train/run.py",
        description="Train one stage of the memory worker (missing parent stages run first).",
        epilog="Examples: see the docstring of train/run.py and train/README.md.")
    parser.add_argument("--stage", required=True,
                        help=f"stage to train: one of {', '.join(tconfig.STAGE_ORDER)} "
                        "(or a path to a stage YAML)")
    parser.add_argument("--profile", help="profile block of the stage YAML: cpu (the ~30-minute "
                        "CPU chain) or gpu (production base, QLoRA on CUDA)")
    parser.add_argument("--runs-dir", default="runs",
                        help="where stage runs live (<runs-dir>/<stage>); default: runs")
    parser.add_argument("--receipts-dir", default="receipts",
                        help="receipts are copied here as <stage>-receipt.json ('' = do not copy)")
    parser.add_argument("--parent-run", help="run folder of the parent stage "
                        "(default: <runs-dir>/<parent>)")
    parser.add_argument("--fresh", action="store_true",
                        help="discard this stage's previous run folder (checkpoints, receipt)")
    parser.add_argument("--no-parents", action="store_true",
                        help="refuse (with the command to run) instead of training missing parents")
    parser.add_argument("--no-build-corpus", action="store_true",
                        help="refuse (with the command to run) instead of building a missing corpus")
    parser.add_argument("--backend", choices=("auto", "torch", "mlx"), default="auto",
                        help="auto: mlx-lm on Apple silicon when installed, else torch")
    parser.add_argument("--mlx-export-only", action="store_true",
                        help="mlx backend: write the data and the mlx_lm command, do not run it")
    parser.add_argument("--no-export", action="store_true",
                        help="do not export the release after the stage (by default the base "
                        "and the student become Q8_0 GGUFs in --release-dir: export/run.py)")
    parser.add_argument("--release-dir", default="release",
                        help="release folder the finished stage is exported to (replaced)")
    parser.add_argument("--eval-rows", type=int, default=16, metavar="N",
                        help="after the export, evaluate base, student and rules on the first N "
                        "rows of the stage corpus's held-out set (heldout.jsonl interleaves "
                        "extract, extract, consolidate, reflect: 16 rows are 8/4/4) into "
                        "<runs-dir>/eval/heldout and the release receipt, then print the table; "
                        "0 = every held-out row (default 16)")
    parser.add_argument("--no-eval", action="store_true",
                        help="do not evaluate the exported release (--no-export implies it)")
    tconfig.add_field_flags(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.eval_rows < 0:
        parser.error("--eval-rows must be 0 (every held-out row) or more")
    args.argv = argv
    overrides = tconfig.flag_overrides(args)
    from transformers import set_seed

    set_seed(overrides.get("seed", tconfig.StageConfig.seed))  # seed first, before anything random
    from memworker.train.loop import RunError, finish_distributed

    try:
        receipt, run_dir = run_chain(args, overrides)
    except (*EXPECTED, RunError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finish_distributed()
    if receipt:
        _summary(receipt, run_dir, args)
    code = export_release(receipt, run_dir, args)
    if code != 0 or args.no_eval or not _exports(receipt, args):
        return code
    return evaluate_release(receipt, args)


def _exports(receipt: dict[str, Any], args) -> bool:
    """Whether this process exports (and then evaluates) the release: rank 0 of a torch run."""
    return (not args.no_export and bool(receipt.get("stage"))
            and int(os.environ.get("RANK", "0")) == 0 and receipt.get("backend") != "mlx")


def export_release(receipt: dict[str, Any], run_dir: Path | None, args) -> int:
    """The main job ends with the release: base and student through export/run.py's path."""
    if args.no_export or not receipt.get("stage") or int(os.environ.get("RANK", "0")) != 0:
        return 0
    if receipt.get("backend") == "mlx":
        print("train: mlx adapters are not exported (export merges PEFT adapters); fuse with "
              "`python -m mlx_lm fuse`")
        return 0
    from memworker.export.cli import main as export_main

    return export_main(["--run", str(run_dir), "--out", args.release_dir, "--with-base",
                        "--force", "--receipts-dir", args.receipts_dir])


def eval_plan(receipt: dict[str, Any], args) -> tuple[list[str], Path, dict[str, Path]]:
    """The evaluator's arguments for the release just exported: base, student and rules on the
    first `--eval-rows` held-out rows of the corpus the stage trained on, every arm capped at
    EVAL_MAX_TOKENS, merged into the release receipt (through the receipts copy when there is
    one, so both stay the same file). Returns (argv, output folder, model arms' GGUFs)."""
    from memworker.export.release import BASE_GGUF, RECEIPT_NAME

    release = Path(args.release_dir)
    student = json.loads((release / RECEIPT_NAME).read_text("utf-8"))["student"]["gguf"]
    ggufs = {"base": release / BASE_GGUF, "student": release / student}
    out = Path(args.runs_dir) / "eval" / EVAL_SET
    into = Path(args.receipts_dir) / RECEIPT_NAME if args.receipts_dir else release / RECEIPT_NAME
    argv = [*(x for name, path in ggufs.items() for x in ("--arm", f"{name}={path}")),
            "--arm", "rules", "--set", EVAL_SET, "--corpus", str(receipt["config"]["corpus"]),
            "--out", str(out), "--max-tokens", str(EVAL_MAX_TOKENS),
            "--into-receipt", str(into), "--release", str(release)]
    if args.eval_rows:
        argv += ["--limit", str(args.eval_rows)]
    return argv, out, ggufs


def retire_stale_eval(argv: list[str]) -> Path | None:
    """An evaluation folder resumes from its samples; `eval/run.py ARGV` refuses to join samples
    made with other models, another corpus, sampler or prompts (`continue_config`). The main job
    moves such a folder aside instead (returns where to), never deletes it, and evaluates afresh.
    A damaged samples.jsonl is not moved: its EvalError goes to the caller."""
    from datetime import datetime, timezone

    from memworker.eval.cli import build_parser, continue_config, planned_config
    from memworker.eval.runner import SAMPLES, ConfigMismatch, read_samples

    if not Path(build_parser().parse_args(argv).out).exists():
        return None  # nothing to resume: no need to hash the GGUFs for a configuration
    out, config = planned_config(argv)
    read_samples(out / SAMPLES)  # a damaged file is reported, not retired
    try:
        continue_config(out, config)
        return None
    except ConfigMismatch as exc:
        why = exc.what  # its advice (another --out, remove the folder) is what happens here
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    aside = out.with_name(f"{out.name}.stale-{stamp}")
    out.rename(aside)
    print(f"train: {why}; moved to {aside}, evaluating afresh")
    return aside


def _fuller_evaluation(release: Path, ggufs: dict[str, Path], rows: int) -> int | None:
    """Rows of a held-out evaluation of these same GGUFs already in the release receipt when it
    ran more rows than `rows` (0 = all): a limited evaluation must not replace it."""
    from memworker.export.release import RECEIPT_NAME
    from memworker.hashing import sha256_file

    doc = json.loads((release / RECEIPT_NAME).read_text("utf-8"))
    old = (doc.get("evaluation") or {}).get(EVAL_SET)
    if not isinstance(old, dict) or not rows:
        return None
    gguf = (old.get("config") or {}).get("gguf") or {}
    if any((gguf.get(a) or {}).get("sha256") != sha256_file(p) for a, p in ggufs.items()):
        return None
    return old["rows"] if isinstance(old.get("rows"), int) and old["rows"] > rows else None


def evaluate_release(receipt: dict[str, Any], args) -> int:
    """The main job's last step: the matched held-out evaluation of the release (in process,
    `eval/run.py`), then the table and where everything is."""
    from memworker.eval.cli import main as eval_main
    from memworker.eval.runner import EvalError
    from memworker.eval.summary import table_lines
    from memworker.export.release import RECEIPT_NAME

    argv, out, ggufs = eval_plan(receipt, args)
    try:
        retire_stale_eval(argv)
    except EvalError as exc:  # a damaged samples.jsonl: what eval/run.py would say on it
        print(f"eval: error: {exc}", file=sys.stderr)
        return 2
    release = Path(args.release_dir)
    kept = _fuller_evaluation(release, ggufs, args.eval_rows)
    if kept is not None:
        at = argv.index("--into-receipt")
        del argv[at:at + 4]  # --into-receipt FILE --release DIR
        print(f"train: {release / RECEIPT_NAME} already holds a {EVAL_SET} evaluation of these "
              f"GGUFs on {kept} rows: kept (this {args.eval_rows}-row evaluation is not merged)")
    print("train: evaluating the release: python eval/run.py " + shlex.join(argv))
    code = eval_main(argv)
    if code != 0:
        return code
    summary = json.loads((out / "summary.json").read_text("utf-8"))
    print()
    for line in table_lines(summary):
        print(line)
    doc = json.loads((release / RECEIPT_NAME).read_text("utf-8"))
    stages = [e["stage"] for e in doc.get("lineage") or []]
    verdict = (doc.get("gate") or {}).get("verdict")
    runs = Path(args.runs_dir)
    print(f"stage receipts: {', '.join(str(runs / s / RECEIPT) for s in stages)}"
          + (f" (copies in {args.receipts_dir}/)" if args.receipts_dir else ""))
    print(f"release: {release}/ (receipt {release / RECEIPT_NAME}"
          + (f", copy {Path(args.receipts_dir) / RECEIPT_NAME}" if args.receipts_dir else "")
          + (f"; release gate: {verdict}" if verdict else "")
          + f"); check it: python export/verify.py {release}"
          + ("" if args.receipts_dir == "receipts" else
             f" --receipts-dir {shlex.quote(args.receipts_dir)}"))
    print(f"eval report: {out / 'report.md'} (summary.json, samples.jsonl beside it)")
    return 0


def _summary(receipt: dict[str, Any], run_dir: Path, args: argparse.Namespace) -> None:
    if "command" in receipt and "stage" not in receipt:
        print(f"train: mlx export written; run: {receipt['command']}")
        return
    res = receipt.get("result", {})
    copied = (f" (copied to {Path(args.receipts_dir) / (receipt['stage'] + '-receipt.json')})"
              if args.receipts_dir else "")
    print(f"train: {receipt['stage']} done: step {res.get('global_step', '?')}, final loss "
          f"{_fmt(res.get('final_train_loss'))}, val loss {_fmt(res.get('val_loss'))}, "
          f"{res.get('tokens_per_s') or res.get('tokens_per_s_estimate')} tok/s, "
          f"{res.get('s_per_step')} s/step — receipt {run_dir / RECEIPT}{copied}")


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def pick_backend(choice: str) -> str:
    if choice != "auto":
        return choice
    from memworker.train.mlx_path import mlx_available
    from memworker.train.model import is_apple_silicon

    if is_apple_silicon():
        if mlx_available():
            return "mlx"
        print("train: Apple silicon without mlx-lm: training with torch on the CPU "
              "(pip install mlx-lm for the faster mlx path)", file=sys.stderr)
    return "torch"


def _lineage(stage: str, profile: str | None, inherited: dict[str, Any]) -> list[tconfig.StageConfig]:
    """Configs from the root stage down to `stage` (parents get only inherited flags)."""
    chain, seen = [], set()
    cfg = tconfig.load_stage(stage, profile, inherited)
    while True:
        chain.append(cfg)
        seen.add(cfg.name)
        if cfg.parent is None:
            return chain[::-1]
        if cfg.parent in seen:
            raise tconfig.ConfigError(f"stage parents form a cycle through {cfg.parent}")
        cfg = tconfig.load_stage(cfg.parent, profile, inherited)


def command_for(stage: str, args: argparse.Namespace, inherited: dict[str, Any]) -> str:
    parts = ["python", "train/run.py", "--stage", stage]
    if args.profile:
        parts += ["--profile", args.profile]
    if args.runs_dir != "runs":
        parts += ["--runs-dir", args.runs_dir]
    for key, value in inherited.items():
        flag = tconfig.flag_name(key)
        if isinstance(value, bool):
            parts.append(flag if value else "--no-" + flag[2:])
        else:
            parts += [flag, str(value)]
    return shlex.join(parts)


def run_chain(args: argparse.Namespace, overrides: dict[str, Any]):
    from memworker.train import loop, mlx_path

    inherited = {k: v for k, v in overrides.items() if k in tconfig.INHERITED_FLAGS}
    target = tconfig.load_stage(args.stage, args.profile, overrides)
    # --parent-run names the parent's finished run: its own ancestors are not this run's concern
    chain = (_lineage(target.parent, args.profile, inherited)
             if target.parent and not args.parent_run else [])
    chain.append(target)
    if any(cfg.base != target.base for cfg in chain):
        raise tconfig.ConfigError("every stage of a chain must use the same base; pass --base")
    base_model = registry.get(target.base) if target.base in registry.BASES else None
    if base_model is not None and base_model.needs_gpu:
        import torch

        if not torch.cuda.is_available():
            raise registry.BaseUnavailable(f"base {base_model.key} needs a CUDA GPU; this "
                                           "machine has none")
    backend = pick_backend(args.backend)
    base = registry.prepare(target.base)
    runs_dir = Path(args.runs_dir)
    receipts_dir = Path(args.receipts_dir) if args.receipts_dir else None
    receipt, run_dir = {}, None
    for cfg in chain:
        is_target = cfg is target
        run_dir = Path(cfg.out) if cfg.out else runs_dir / cfg.name
        if not is_target:
            if (run_dir / RECEIPT).is_file():
                continue
            hint = command_for(cfg.name, args, inherited)
            if args.no_parents:
                raise MissingParent(f"stage {target.name} warm-starts from {cfg.name}, which has "
                                    f"no finished run in {run_dir}; run `{hint}` first")
            print(f"train: {cfg.name} has no finished run in {run_dir}: running it first "
                  f"(`{hint}`)")
        parent_dir = None
        if cfg.parent:
            parent_dir = Path(args.parent_run) if is_target and args.parent_run \
                else runs_dir / cfg.parent
        ensure_corpus(cfg.corpus, cfg.corpus_domain, args.no_build_corpus)
        if cfg.replay_fraction > 0:
            ensure_corpus(cfg.replay_corpus, "coding", args.no_build_corpus)
        req = loop.RunRequest(
            cfg=cfg, paths=loop.RunPaths(run_dir, parent_dir, receipts_dir),
            args={"argv": args.argv,
                  "given": {k: v for k, v in vars(args).items()
                            if v not in (None, False) and k != "argv"}},
            fresh=args.fresh and is_target,
            parent_hint=command_for(cfg.parent, args, inherited) if cfg.parent else "")
        if backend == "mlx":
            receipt = mlx_path.run_mlx(req, base, execute=not args.mlx_export_only)
        else:
            receipt = loop.run_stage(req, base)
    return receipt, run_dir


def ensure_corpus(folder: str | Path, domain: str, no_build: bool) -> None:
    """Build a missing corpus through the corpus stage's command line, `memworker.corpus.cli`,
    in this process (one process at a time; works in a non-editable install too)."""
    folder = Path(folder)
    if (folder / "manifest.json").is_file():
        return
    cmd = tdata.corpus_command(folder, domain)
    if no_build:
        raise tdata.DataError(f"no corpus in {folder}; build it with `{cmd}`")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / "manifest.json").is_file():
            return
        print(f"train: no corpus in {folder}: building it (`{cmd}`)")
        from memworker.corpus.cli import main as build_corpus_main

        if build_corpus_main(tdata.corpus_build_args(folder, domain)) != 0:
            raise tdata.DataError(f"building the corpus failed; run `{cmd}` and read its errors")
