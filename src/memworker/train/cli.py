"""The training stage of `python train/run.py`: its arguments, the chain of stages (a missing
corpus built, missing parent stages trained first, then the stage itself, with torch or mlx-lm on
Apple silicon) and its one-line summary. The main job around it (the export and the evaluation
that follow) is `memworker.pipeline`."""

from __future__ import annotations

import argparse
import fcntl
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from memworker import registry
from memworker.corpus.cli import main as build_corpus_main
from memworker.receipts import RECEIPT
from memworker.train import config as tconfig
from memworker.train import data as tdata
from memworker.train import lineage
from memworker.train import sitting as tsitting
from memworker.train.lineage import LineageError, MissingParent

EXPECTED = (tconfig.ConfigError, tdata.DataError, LineageError, registry.BaseUnavailable)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The stage flags of `python train/run.py` (its parser adds the config fields last:
    `config.add_field_flags`)."""
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
    parser.add_argument("--sitting-minutes", type=float, metavar="M",
                        help="wall-clock budget of this sitting, from the command's start: the "
                        "stage being trained stops at the end of the first optimizer step at or "
                        "after M minutes with a checkpoint, unfinished (no receipt, no child "
                        "stage, no export), and the command exits with status "
                        f"{tsitting.SITTING_EXIT}; save the checkpoint with train/sitting.py "
                        "and give the same command in the next sitting (train/README.md "
                        "\"Training across sittings\"); not part of the stage config")


def train(args: argparse.Namespace) -> tuple[int, dict[str, Any], Path | None]:
    """Seed first, then the chain up to `args.stage` and its summary line. Returns (exit status,
    the stage receipt, its run folder); status 2 with the one-line error of an expected failure,
    `sitting.SITTING_EXIT` (3) when the sitting's budget stopped a stage before its last step
    (its checkpoint is written; nothing after it ran)."""
    deadline = (None if getattr(args, "sitting_minutes", None) is None
                else time.time() + args.sitting_minutes * 60)
    overrides = tconfig.flag_overrides(args)
    from transformers import set_seed

    set_seed(overrides.get("seed", tconfig.StageConfig.seed))  # seed first, before anything random
    # here, not at the top: train.loop imports torch, transformers and trl
    from memworker.train.loop import RunError, finish_distributed

    try:
        if deadline is not None and args.sitting_minutes <= 0:
            raise RunError(f"--sitting-minutes must be > 0, not {args.sitting_minutes:g}")
        receipt, run_dir = run_chain(args, overrides, deadline)
    except (*EXPECTED, RunError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2, {}, None
    except tsitting.SittingEnded as ended:
        finish_distributed()
        if ended.record:  # the main process
            _sitting_summary(ended, args)
        return tsitting.SITTING_EXIT, {}, None
    finish_distributed()
    if receipt:
        _summary(receipt, run_dir, args)
    return 0, receipt, run_dir


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


def _sitting_summary(ended: tsitting.SittingEnded, args: argparse.Namespace) -> None:
    rec = ended.record
    print(f"train: sitting budget of {args.sitting_minutes:g} min reached: stage {ended.stage} "
          f"stopped at step {rec.get('to_step')} of {rec.get('max_steps')} (steps "
          f"{rec.get('from_step')}–{rec.get('to_step')} this sitting, {rec.get('runtime_s')} s); "
          f"checkpoint {ended.run_dir / 'checkpoints' / rec.get('checkpoint', '?')}, recorded in "
          f"{ended.run_dir / tsitting.SITTINGS}. The stage is not finished (no receipt, no "
          "adapter): no later stage, export or evaluation ran")
    for line in tsitting.next_steps(ended.run_dir, args.argv):
        print(f"train: {line}")


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def pick_backend(choice: str) -> str:
    if choice != "auto":
        return choice
    # here, not at the top: both import torch (mlx_path through train.loop)
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


def run_chain(args: argparse.Namespace, overrides: dict[str, Any],
              deadline: float | None = None):
    # here, not at the top: train.loop (and mlx_path through it) imports torch, transformers, trl
    from memworker.train import loop, mlx_path

    inherited = {k: v for k, v in overrides.items() if k in tconfig.INHERITED_FLAGS}
    target = tconfig.load_stage(args.stage, args.profile, overrides)
    # the committed release's student as the parent (`parent_from: release`): nothing before
    # this stage is trained here
    from_release = None
    if target.parent and target.parent_from == "release" and not args.parent_run:
        from_release, release = lineage.release_parent(target.parent)
        print(f"train: {target.name} warm-starts from "
              f"{lineage.release_parent_words(target.parent, release)} "
              f"({_shown(from_release)}, stage {target.parent}, committed; not trained here)")
    # --parent-run names the parent's finished run: its own ancestors are not this run's concern
    chain = (_lineage(target.parent, args.profile, inherited)
             if target.parent and not args.parent_run and from_release is None else [])
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
    if deadline is not None and backend == "mlx":
        raise loop.RunError("--sitting-minutes stops the torch path's Trainer; mlx-lm runs "
                            "in one go: train without it (or with --backend torch)")
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
                else _shown(from_release) if is_target and from_release is not None \
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
            parent_hint=command_for(cfg.parent, args, inherited) if cfg.parent else "",
            deadline=deadline, budget_minutes=getattr(args, "sitting_minutes", None))
        if backend == "mlx":
            receipt = mlx_path.run_mlx(req, base, execute=not args.mlx_export_only)
        else:
            receipt = loop.run_stage(req, base)
    return receipt, run_dir


def _shown(path: Path) -> Path:
    """`path` relative to the working folder when it lies inside it (as receipts name runs)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


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
        if build_corpus_main(tdata.corpus_build_args(folder, domain)) != 0:
            raise tdata.DataError(f"building the corpus failed; run `{cmd}` and read its errors")
