"""`python export/run.py` and `python export/verify.py`: argument parsing and the one-line
summaries; the work is in `memworker.export.release`, `memworker.export.receipt` (a waiver) and
`memworker.export.verify`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from memworker import registry
from memworker.export import converter, gate
from memworker.export.receipt import ExportError, default_publish_dir, record_live, record_waiver
from memworker.export.release import BASE_GGUF, export_base, export_release
from memworker.export.verify import verify_release
from memworker.inference import codec, hybrid
from memworker.prompts import EVENT_STAMPS
from memworker.receipts import RELEASE_RECEIPT
from memworker.turns import HISTORIES, TURN_QUOTES
from memworker.wire import LAYOUTS

EXPECTED = (ExportError, registry.BaseUnavailable, converter.ConverterUnavailable,
            converter.ConversionFailed)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python export/run.py",
        description="Merge a stage's adapter into its base, convert to a Q8_0 GGUF and write the "
                    "release folder (Modelfile, adapter, model card, receipt, SHA256SUMS).",
        epilog="Examples: see the docstring of export/run.py and export/README.md.")
    parser.add_argument("--run", help="finished stage run folder (runs/<stage>) to export")
    parser.add_argument("--base-only", action="store_true",
                        help=f"export the base alone through the same path as <out>/{BASE_GGUF}")
    parser.add_argument("--with-base", action="store_true",
                        help=f"with --run: also export the base as <out>/{BASE_GGUF}")
    parser.add_argument("--base", help="base registry key or local HF folder (default: the "
                        "run receipt's base; with --base-only: " + registry.DEFAULT_BASE + ")")
    parser.add_argument("--out", default="release", help="release folder (default: release)")
    parser.add_argument("--force", action="store_true",
                        help="replace another release found in --out")
    parser.add_argument("--receipts-dir", default="receipts",
                        help="committed receipts: stage receipts (lineage) are looked up here and "
                        "release-receipt.json is copied here ('' = neither)")
    parser.add_argument("--publish", metavar="DIR",
                        help="write the top-level Modelfile and SHA256SUMS here (default: the "
                        "current folder when --out lies inside it)")
    parser.add_argument("--no-publish", action="store_true", help="write no top-level files")
    parser.add_argument("--tokenizer-pre", metavar="NAME",
                        help="force llama.cpp's BPE pre-tokenizer name (only for a local base "
                        "whose tokenizer the converter does not recognise, e.g. gpt-2)")
    parser.add_argument("--work-dir", help="where the temporary merged HF folder goes "
                        "(default: the system temp folder)")
    parser.add_argument("--extract-form", default="window",
                        help="the form the student extracts in (memworker.turns: window, turns, "
                             "walk, sentences; the one it was trained in): recorded as the "
                             "release's worker")
    parser.add_argument("--claim-gate", default=None, metavar="SCORE>=T",
                        help="the student's claim confidence gate (memworker.inference.gate; its "
                             "threshold chosen on val with eval/studies/confidence.py): "
                             "recorded as the release's worker, named in the Modelfile; evaluate "
                             "the student with the same gate (eval/run.py --claim-gate "
                             "student=...)")
    parser.add_argument("--propose", action="store_true",
                        help="with a turns form and --claim-gate: every turn of the student "
                             "answers at least one claim for its gate to keep or drop; recorded "
                             "as the release's worker; evaluate the student so (eval/run.py "
                             "--propose student)")
    parser.add_argument("--turn-history", default="answers", choices=HISTORIES,
                        help="with a turns form: none, each turn reads the window and its own "
                             "question alone (a student trained with train/run.py "
                             "--turn-history none); recorded as the release's worker; evaluate "
                             "the student so (eval/run.py --turn-history none)")
    parser.add_argument("--event-stamps", default="full", choices=EVENT_STAMPS,
                        help="minute: the student's extract prompts write the events' timestamps "
                             "to the minute (a student trained with train/run.py --event-stamps "
                             "minute); recorded as the release's worker; evaluate the student so "
                             "(eval/run.py --event-stamps minute)")
    parser.add_argument("--turn-quotes", default="upto", choices=TURN_QUOTES,
                        help="with a turns form: own, each turn's claims quote its own event "
                             "only; recorded as the release's worker; evaluate the student so "
                             "(eval/run.py --turn-quotes own)")
    parser.add_argument("--claim-layout", default="v3", choices=LAYOUTS,
                        help="with a turns form: v6, the student writes claims without quotes "
                             "and the codec quotes the turn's sentence (a student trained with "
                             "train/run.py --claim-layout v6); recorded as the release's worker; "
                             "evaluate the student so (eval/run.py --claim-layout v6)")
    parser.add_argument("--turn-gate", type=float, default=None, metavar="T",
                        help="with --extract-form turns: a turn whose event the committed turn "
                             "gate gives P(fact) below T is not asked "
                             "(memworker.inference.turn_gate); recorded as the release's worker; "
                             "evaluate the student so (eval/run.py --turn-gate student=T)")
    parser.add_argument("--turn-gate-tail", default="read", choices=codec.TAILS,
                        help="with --turn-gate: drop, the prompts end at the last asked turn's "
                             "event (the unasked events after it are not read); omit, that and "
                             "no unasked turn in the conversation; recorded as the "
                             "release's worker; evaluate the student so (eval/run.py "
                             "--turn-gate-tail drop|omit)")
    parser.add_argument("--with-rules", action="store_true",
                        help="the hybrid worker: the rules' extract claims kept beside the "
                             "student's (after its gate; memworker.inference.hybrid); recorded "
                             "as the release's worker; evaluate the student so (eval/run.py "
                             "--with-rules student)")
    parser.add_argument("--reflect-rules", action="store_true",
                        help="the reflection fallback: where the student abstains and the rules "
                             "answer from a memory holding every content word of the question, "
                             "the rules' answer (memworker.inference.hybrid); recorded as the "
                             "release's worker; evaluate the student so (eval/run.py "
                             "--reflect-rules student)")
    parser.add_argument("--consolidate-rules", action="store_true",
                        help="consolidation by the rules: the worker answers consolidation "
                             "requests with the rules' observations (memworker.inference.hybrid); "
                             "recorded as the release's worker; evaluate the student so "
                             "(eval/run.py --consolidate-rules student)")
    parser.add_argument("--waive", nargs=3, metavar=("SET", "METRIC", "REASON"),
                        help="record a reasoned release-gate waiver in the release in --out "
                        "(e.g. --waive heldout extract_support \"why it ships anyway\"); "
                        "re-signs the folder")
    parser.add_argument("--record-live", default=None, metavar="SUMMARY.json",
                        help="record a live-acceptance summary (eval/live.py's summary.json, "
                        "e.g. receipts/live/summary.json) as the release's live acceptance in "
                        "--out, which a format-2 release gate reads; re-signs the folder")
    return parser


def run(args: argparse.Namespace) -> list[str]:
    """Export what `args` asks for; returns summary lines (raises the EXPECTED errors)."""
    out = Path(args.out)
    publish = None if args.no_publish else (Path(args.publish) if args.publish
                                            else default_publish_dir(out))
    common = {"force": args.force, "receipts_dir": args.receipts_dir or None,
              "pre_tokenizer": args.tokenizer_pre, "work_dir": args.work_dir}
    lines = []
    if args.waive:
        set_name, metric, reason = args.waive
        receipt = record_waiver(out, set_name, metric, reason,
                                receipts_dir=args.receipts_dir or None, publish_dir=publish)
        lines.append(f"export: waiver for {metric} on {set_name} recorded in "
                     f"{out / 'release-receipt.json'}; release gate: {receipt['gate']['verdict']}")
        return lines
    if args.record_live:
        try:
            summary = json.loads(Path(args.record_live).read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise ExportError(f"--record-live: cannot read {args.record_live}: {exc}") from None
        if not isinstance(summary, dict):
            raise ExportError(f"--record-live: {args.record_live} is not a JSON object")
        receipt = record_live(out, summary, receipts_dir=args.receipts_dir or None,
                              publish_dir=publish)
        lines.append(f"export: live acceptance {args.record_live} recorded in "
                     f"{out / 'release-receipt.json'}; release gate: {receipt['gate']['verdict']}")
        return lines
    if args.run:
        receipt = export_release(args.run, out, base=args.base, publish_dir=publish,
                                 extract_form=args.extract_form, claim_gate=args.claim_gate,
                                 propose=args.propose, turn_history=args.turn_history,
                                 event_stamps=args.event_stamps, turn_quotes=args.turn_quotes,
                                 claim_layout=args.claim_layout, turn_gate=args.turn_gate,
                                 turn_gate_tail=args.turn_gate_tail,
                                 **hybrid.settings_of(args), **common)
        student = receipt["student"]
        art = receipt["artifacts"][student["gguf"]]
        lines.append(f"export: {out / student['gguf']} ({art['bytes'] / 1e6:.1f} MB, "
                     f"{student['seconds']:.1f} s: merge {student['merge']['seconds']:.1f} s, "
                     f"convert {student['conversion']['seconds']:.1f} s)")
        base_key = receipt["base"]["key"] if receipt["base"].get("source") != "local" \
            else receipt["base"]["hf_repo"]
        common["force"] = False  # the base joins the release just written
    if args.base_only or args.with_base:
        key = args.base or (base_key if args.run else registry.DEFAULT_BASE)
        path = export_base(out, base_key=key, publish_dir=publish, **common)
        lines.append(f"export: {path} ({path.stat().st_size / 1e6:.1f} MB)")
    written = ", ".join(n for n in ("Modelfile", "README.md", "release-receipt.json", "SHA256SUMS")
                        if (out / n).is_file())
    lines.append(f"export: release {out} written ({written})"
                 + (f"; top-level files in {publish}" if publish else "")
                 + f"; check it with `python export/verify.py {out} --allow-unevaluated` "
                 "(without the flag once `eval/run.py --into-receipt` has evaluated it: the "
                 "release gate)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.waive or args.record_live) and (args.run or args.base_only):
        parser.error("--waive and --record-live change an existing release; give them alone "
                     "with --out")
    if args.waive and args.record_live:
        parser.error("--waive and --record-live: give one at a time")
    if not args.run and not args.base_only and not args.waive and not args.record_live:
        parser.error("give --run DIR (a finished stage run), --base-only, --waive or "
                     "--record-live")
    if args.run and args.base_only:
        parser.error("--base-only exports the base alone; use --with-base together with --run")
    started = time.perf_counter()
    try:
        lines = run(args)
    except EXPECTED as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    print(f"export: done in {time.perf_counter() - started:.1f} s")
    return 0


def verify_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python export/verify.py",
        description="Verify a release folder: SHA256SUMS, the release receipt against the files "
                    "and the committed stage receipts, the Modelfile, and that each GGUF loads "
                    "and answers one schema-constrained extraction request.")
    parser.add_argument("folder", nargs="?", default="release", help="release folder")
    parser.add_argument("--receipts-dir", default="receipts",
                        help="committed stage receipts to check the lineage against ('' = skip)")
    parser.add_argument("--no-load", action="store_true",
                        help="hash and receipt checks only (do not load the GGUFs)")
    parser.add_argument("--threads", type=int, help="llama.cpp threads")
    parser.add_argument("--allow-unevaluated", action="store_true",
                        help="let a release whose receipt holds no evaluation pass the release "
                        "gate (by default it fails: evaluate it with eval/run.py --into-receipt)")
    parser.add_argument("--replay", type=int, default=0, metavar="N",
                        help="also run the store's worker (MemWorkerBackend.from_release) on the "
                             "first N extract windows of the committed evaluation "
                             "(RECEIPTS_DIR/eval/SET) and check it writes what the evaluation "
                             "recorded for the student, byte for byte (about 10 s a window)")
    parser.add_argument("--replay-set", default="heldout", help="--replay's set (heldout)")
    parser.add_argument("--corpus", default="data/corpus",
                        help="--replay: the corpus holding the set's rows (data/corpus)")
    args = parser.parse_args(argv)
    if args.replay < 0:
        parser.error("--replay must be 0 or more")
    if args.replay and args.no_load:
        parser.error("--replay loads the student: leave out --no-load")
    started = time.perf_counter()
    problems = verify_release(args.folder, args.receipts_dir or None, load=not args.no_load,
                              threads=args.threads, allow_unevaluated=args.allow_unevaluated,
                              replay=args.replay, replay_set=args.replay_set,
                              corpus=args.corpus)
    gate_line = _gate_line(Path(args.folder))
    if gate_line and not problems:
        print(gate_line)
    elif gate_line and any("release gate" in p for p in problems):
        print(gate_line, file=sys.stderr)
    if problems:
        print(f"verify: FAILED: {problems[0]}", file=sys.stderr)
        for extra in problems[1:]:
            print(f"verify: also: {extra}", file=sys.stderr)
        return 1
    print(f"verify: {args.folder} OK ({time.perf_counter() - started:.1f} s)")
    return 0


def _gate_line(folder: Path) -> str | None:
    """`verify: release gate <verdict> on <set>: evaluated on N of the M rows …` for a release
    whose receipt holds an evaluation (the rows it ran, since a limited evaluation is gated like a
    full one); None when the receipt is unreadable or holds no evaluation."""
    try:
        receipt = json.loads((folder / RELEASE_RECEIPT).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    sets = gate.coverage(receipt) if isinstance(receipt, dict) else []
    if not sets:
        return None
    return f"verify: release gate {gate.evaluate(receipt)['verdict']}; " + "; ".join(sets)
