"""The main job, above the stages: `python train/run.py --stage general` trains the stage chain
(a missing corpus built first, `memworker.train.cli`), exports base and student to the release
folder (`memworker.export`), evaluates the release on the first held-out rows
(`memworker.eval`) and prints the table.

The stages import none of each other for this; what crosses them is wired here: the evaluator
records into the release receipt through the receipt's one writer,
`memworker.export.receipt.record_set` (as `python eval/run.py` does).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from memworker.eval import cli as eval_cli
from memworker.eval import summary as eval_summary
from memworker.eval.runner import SAMPLES, ConfigMismatch, EvalError, read_samples
from memworker.export import cli as export_cli
from memworker.export.receipt import record_set
from memworker.export.release import BASE_GGUF
from memworker.hashing import sha256_file
from memworker.inference.hmem import worker_flags
from memworker.receipts import RECEIPT, RELEASE_RECEIPT
from memworker.train import cli as train_cli
from memworker.train import config as tconfig
from memworker.train import lineage

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
    train_cli.add_arguments(parser)
    parser.add_argument("--no-export", action="store_true",
                        help="do not export the release after the stage (by default the base "
                        "and the student become Q8_0 GGUFs in --release-dir: export/run.py)")
    parser.add_argument("--release-dir", default=None,
                        help="release folder the finished stage is exported to (replaced; "
                        "default: <runs-dir>/release, so that the main job never touches the "
                        "committed release: `release/`, receipts/ and the top-level Modelfile "
                        "and SHA256SUMS; scripts/release.sh names release/ and receipts/)")
    parser.set_defaults(receipts_dir=None)
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
    """`python train/run.py`: the stage chain, then the export and the evaluation."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.eval_rows < 0:
        parser.error("--eval-rows must be 0 (every held-out row) or more")
    args.argv = argv
    resolve_output_dirs(args)
    code, receipt, run_dir = train_cli.train(args)
    if code != 0:
        return code
    code = export_release(receipt, run_dir, args)
    if code != 0 or args.no_eval or not _exports(receipt, args):
        return code
    return evaluate_release(receipt, args)


def resolve_output_dirs(args) -> None:
    """The main job writes its release, receipts and report under --runs-dir unless told
    otherwise: a newcomer's run must leave every committed file as it was (issue 45)."""
    runs = Path(args.runs_dir)
    if args.receipts_dir is None:
        args.receipts_dir = str(runs / "receipts")
    if args.release_dir is None:
        args.release_dir = str(runs / "release")


# --- the export -----------------------------------------------------------------------------

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
    return export_cli.main(["--run", str(run_dir), "--out", args.release_dir, "--with-base",
                            "--force", "--receipts-dir", args.receipts_dir,
                            *release_worker_flags(receipt)])


def release_worker_flags(receipt: dict[str, Any], arm: str | None = None) -> list[str]:
    """A stage that warm-started from the committed release's student (`parent_from: release`)
    is exported and evaluated as that release's worker runs it (its extraction form, proposing
    and claim gate: `worker_flags`); any other stage with the defaults."""
    if (receipt.get("config") or {}).get("parent_from") != "release":
        return []
    _, release = lineage.release_parent(receipt["config"]["parent"])
    return worker_flags(release.get("worker") or {}, arm)


# --- the evaluation -------------------------------------------------------------------------

def evaluate(argv: list[str] | None = None) -> int:
    """`python eval/run.py ARGV`: the evaluator, a release receipt given to --into-receipt
    recorded and re-signed by the receipt's one writer."""
    return eval_cli.main(argv, record_release=record_set)


def eval_plan(receipt: dict[str, Any], args) -> tuple[list[str], Path, dict[str, Path]]:
    """The evaluator's arguments for the release just exported: base, student and rules on the
    first `--eval-rows` held-out rows of the corpus the stage trained on, every arm capped at
    EVAL_MAX_TOKENS, merged into the release receipt (through the receipts copy when there is
    one, so both stay the same file). Returns (argv, output folder, model arms' GGUFs)."""
    release = Path(args.release_dir)
    student = json.loads((release / RELEASE_RECEIPT).read_text("utf-8"))["student"]["gguf"]
    ggufs = {"base": release / BASE_GGUF, "student": release / student}
    out = Path(args.runs_dir) / "eval" / EVAL_SET
    into = (Path(args.receipts_dir) / RELEASE_RECEIPT if args.receipts_dir
            else release / RELEASE_RECEIPT)
    argv = [*(x for name, path in ggufs.items() for x in ("--arm", f"{name}={path}")),
            "--arm", "rules", "--set", EVAL_SET, "--corpus", str(receipt["config"]["corpus"]),
            "--out", str(out), "--max-tokens", str(EVAL_MAX_TOKENS),
            "--into-receipt", str(into), "--release", str(release),
            *release_worker_flags(receipt, "student")]
    if args.eval_rows:
        argv += ["--limit", str(args.eval_rows)]
    return argv, out, ggufs


def retire_stale_eval(argv: list[str]) -> Path | None:
    """An evaluation folder resumes from its samples; `eval/run.py ARGV` refuses to join samples
    made with other models, another corpus, sampler or prompts (`continue_config`). The main job
    moves such a folder aside instead (returns where to), never deletes it, and evaluates afresh.
    A damaged samples.jsonl is not moved: its EvalError goes to the caller."""
    if not Path(eval_cli.build_parser().parse_args(argv).out).exists():
        return None  # nothing to resume: no need to hash the GGUFs for a configuration
    out, config = eval_cli.planned_config(argv)
    read_samples(out / SAMPLES)  # a damaged file is reported, not retired
    try:
        eval_cli.continue_config(out, config)
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
    doc = json.loads((release / RELEASE_RECEIPT).read_text("utf-8"))
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
        print(f"train: {release / RELEASE_RECEIPT} already holds a {EVAL_SET} evaluation of "
              f"these GGUFs on {kept} rows: kept (this {args.eval_rows}-row evaluation is not "
              "merged)")
    print("train: evaluating the release: python eval/run.py " + shlex.join(argv))
    code = evaluate(argv)
    if code != 0:
        return code
    summary = json.loads((out / "summary.json").read_text("utf-8"))
    print()
    for line in eval_summary.table_lines(summary):
        print(line)
    doc = json.loads((release / RELEASE_RECEIPT).read_text("utf-8"))
    stages = [e["stage"] for e in doc.get("lineage") or []]
    verdict = (doc.get("gate") or {}).get("verdict")
    runs = Path(args.runs_dir)
    if (receipt.get("config") or {}).get("parent_from") == "release":
        # only the last stage ran here; the ones before it are the committed release's chain
        earlier = stages[:-1]
        parent = (receipt.get("parent") or {}).get("run_dir")
        _, release_doc = lineage.release_parent(receipt["config"]["parent"])
        whose = lineage.release_parent_words(receipt["config"]["parent"], release_doc)
        print(f"stage receipts: {runs / stages[-1] / RECEIPT} (trained here"
              + (f"; copy in {args.receipts_dir}/" if args.receipts_dir else "")
              + f"), warm-started from {whose} {parent}/{RECEIPT}"
              + (f" (its chain {' → '.join(earlier)}: receipts/<stage>-receipt.json, "
                 "trained by scripts/release.sh)" if earlier else ""))
    else:
        print(f"stage receipts: {', '.join(str(runs / s / RECEIPT) for s in stages)}"
              + (f" (copies in {args.receipts_dir}/)" if args.receipts_dir else ""))
    print(f"release: {release}/ (receipt {release / RELEASE_RECEIPT}"
          + (f", copy {Path(args.receipts_dir) / RELEASE_RECEIPT}" if args.receipts_dir else "")
          + (f"; release gate: {verdict}" if verdict else "")
          + f"); check it: python export/verify.py {release}"
          + ("" if args.receipts_dir == "receipts" else
             f" --receipts-dir {shlex.quote(args.receipts_dir)}"))
    print(f"eval report: {out / 'report.md'} (summary.json, samples.jsonl beside it)")
    return 0
