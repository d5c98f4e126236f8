"""Command line of the corpus stage (entry script: corpus/build.py)."""

from __future__ import annotations

import argparse
import sys
import time

from memworker.corpus.build import (
    DEFAULT_EPISODES,
    CorpusIntegrityError,
    audit_corpus,
    build_corpus,
    load_rows,
    verify_corpus,
)
from memworker.corpus.natural import NaturalSetError, audit_natural, build_natural
from memworker.corpus.probes import table as probes_table
from memworker.corpus.probes import transfer_report
from memworker.corpus.teacher import TeacherError

NATURAL_GENERATOR = "memworker.corpus.natural"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python corpus/build.py",
        description="Build, verify or re-audit a memworker training corpus.",
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", metavar="DIR", help="build a corpus into DIR")
    mode.add_argument(
        "--verify", metavar="DIR", help="check every file of a frozen corpus against its manifest"
    )
    mode.add_argument(
        "--audit", metavar="DIR", help="verify, then re-audit every row of a frozen corpus"
    )
    mode.add_argument(
        "--probes", metavar="DIR",
        help="verify a frozen corpus, then print its skeleton overlap and shortcut-probe table "
        "(recomputed from the rows; memworker.corpus.probes)",
    )
    p.add_argument(
        "--natural",
        metavar="SRC",
        help="freeze the hand-written natural set from SRC (corpus/natural) into --out "
        "instead of generating a corpus (test only, never trained on)",
    )
    p.add_argument("--seed", type=int, default=13, help="generation seed (default 13)")
    p.add_argument(
        "--episodes",
        type=int,
        default=DEFAULT_EPISODES,
        help=f"episodes to generate, 3 rows each (default {DEFAULT_EPISODES})",
    )
    p.add_argument(
        "--domain",
        choices=("general", "coding"),
        default="general",
        help="general: the 16 life domains; coding: coding-agent sessions",
    )
    p.add_argument(
        "--no-tokens",
        action="store_true",
        help="skip counting tokens with the embedded tokenizer (faster; the "
        "token limits (1,536 prompt, 2,560 full chat) are then not enforced)",
    )
    p.add_argument(
        "--teacher",
        metavar="URL",
        help="base URL of an OpenAI-compatible server that paraphrases events, ending in /v1 "
        "(e.g. http://127.0.0.1:8000/v1; optional; unreachable or failing: the build fails)",
    )
    p.add_argument(
        "--voice", choices=("natural",), default=None,
        help="rewrite the extract windows as people write (several facts per message, "
             "casual spelling, fillers; memworker.corpus.voice); off by default")
    p.add_argument("--teacher-model", metavar="NAME", help="model name sent to the teacher")
    p.add_argument(
        "--teacher-max-rows",
        type=int,
        metavar="N",
        help="paraphrase at most N extract rows (default: all)",
    )
    p.add_argument(
        "--natural-manifest",
        metavar="PATH",
        help="the natural set's manifest.json (or folder) whose sha256 the corpus manifest "
        "records (default: data/natural when it exists; optional)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def _table(rows: list[tuple[str, object]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def summary(m: dict) -> str:
    """The figures of issue 11 from a corpus manifest: pre-repair audit, tokens, transfer."""
    a = m["audit"]
    pre = a.get("pre_repair_violations", {})
    lines = [("pre-repair violations", f"{pre.get('total')} in {pre.get('rows')} rows "
              f"{pre.get('by_code')}"),
             ("repaired from truth", a.get("repaired_from_truth"))]
    tok = m.get("tokens") or {}
    for name, t in (tok.get("targets") or {}).items():
        lines.append((f"tokens {name}", f"{t['figure']} target {t['target']} "
                                        f"{'PASS' if t['pass'] else 'FAIL'}"))
    if m.get("natural"):
        lines.append(("natural set manifest", m["natural"]["manifest_file_sha256"]))
    out = _table(lines)
    if m.get("transfer"):
        out += "\n" + probes_table(m["transfer"])
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.probes:
            verify_corpus(args.probes)
            rows = [r for s in ("train", "val", "test")
                    for r in load_rows(args.probes, s, form="canonical")]
            start = time.perf_counter()
            report = transfer_report(rows)
            print(probes_table(report))
            print(f"({len(rows)} rows, {time.perf_counter() - start:.1f}s)")
            return 0
        if args.verify:
            m = verify_corpus(args.verify)
            print(
                f"ok: {args.verify}: {len(m['files'])} files match manifest "
                f"({'seed ' + str(m['seed']) if 'seed' in m else 'hand-written'}, "
                f"{m['totals']['rows']} rows)"
            )
            return 0
        if args.audit and verify_corpus(args.audit).get("generator") == NATURAL_GENERATOR:
            report = audit_natural(args.audit)
            print(_table([("rows", report["rows"]),
                          ("rows with violations", report["rows_with_violations"])]
                         + [(f"violation {c}", n) for c, n in report["violations"].items()]))
            for code, example in report["examples"].items():
                print(f"  e.g. {code}: {example}")
            return 0 if not report["rows_with_violations"] else 1
        if args.audit:
            report = audit_corpus(args.audit)
            lines = [
                ("rows", report["rows"]),
                ("rows with violations", report["rows_with_violations"]),
                ("family split matches hash", report["family_split_ok"]),
                ("held-out rows intact", report["heldout_ok"]),
            ]
            lines += [(f"violation {c}", n) for c, n in report["violations"].items()]
            lines += [
                (f"excluded at build: {c}", n) for c, n in report["exclusions_at_build"].items()
            ]
            print(_table(lines))
            for code, example in report["examples"].items():
                print(f"  e.g. {code}: {example}")
            ok = (
                not report["rows_with_violations"]
                and report["heldout_ok"]
                and report["family_split_ok"]
            )
            return 0 if ok else 1
    except CorpusIntegrityError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.natural:
        try:
            m = build_natural(args.natural, args.out, count_tokens=not args.no_tokens)
        except NaturalSetError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        c = m["totals"]
        per_split = ", ".join(f"{k} {v['rows']}" for k, v in m["counts"].items())
        print(f"built {args.out}: {m['conversations']} hand-written conversations, "
              f"{c['rows']} rows ({per_split}; {c['tasks']})")
        return 0
    if args.teacher and not args.teacher_model:
        print("error: --teacher needs --teacher-model", file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        m = build_corpus(
            args.out,
            seed=args.seed,
            episodes=args.episodes,
            domain=args.domain,
            count_tokens=not args.no_tokens,
            teacher=args.teacher,
            teacher_model=args.teacher_model,
            teacher_max_rows=args.teacher_max_rows,
            progress=not args.quiet,
            natural_manifest=args.natural_manifest,
            voice=args.voice,
        )
    except TeacherError as exc:
        print(f"error: {exc}; nothing was written", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    took = time.perf_counter() - start
    parts = []
    for s in ("train", "val", "test"):
        c = m["counts"][s]
        parts.append(f"{s} {c['rows']} rows/{c['episodes']} episodes/{c['families']} families")
    tok = m["tokens"]
    tok_txt = (
        f"; tokens max {max(tok[s]['max_total'] for s in ('train', 'val', 'test') if tok[s])}"
        if tok
        else "; tokens not counted"
    )
    print(
        f"built {args.out} in {took:.1f}s: "
        + ", ".join(parts)
        + f"; excluded {m['exclusions']['total']}; held-out {m['heldout']['rows']}"
        + tok_txt
    )
    print(summary(m))
    return 0
