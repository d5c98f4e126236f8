"""The README's results block, generated from the committed receipts (never typed by hand).

`render(receipts_dir)` reads `release-receipt.json` (its `evaluation.<set>` summaries, written by
`eval/run.py --into-receipt`) and `live-summary.json` when present, and returns a markdown block:
which release it describes, per evaluated set (heldout, test, natural, then any other) a header
(rows, corpus manifest, limit, token cap, the command that produced it) and one table of each
task's key metrics per arm (value [95 % interval] (num/den), n rows) with the paired
student - base and student - rules differences, the safety counters, the live acceptance table,
and the issue-15 targets, each computed from the figures as met / not met / not measured.

`replace_block` / `check` keep the README's copy between `BEGIN` and `END` equal to it
(`python eval/results.py --write README.md`, `--check README.md`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memworker.eval.grade import BINARY_METRICS, PRIMARY
from memworker.eval.summary import coverage_line
from memworker.receipts import RELEASE_RECEIPT as RELEASE

BEGIN = "<!-- results:begin (python eval/results.py --write README.md; do not edit) -->"
END = "<!-- results:end -->"
LIVE = "live-summary.json"
SET_ORDER = ("heldout", "test", "natural")
ARM_ORDER = ("base", "student", "rules")
#: (task, metric) rows of a set's table, in order; a row no arm measured is left out
KEY_METRICS = (
    ("extract", PRIMARY["extract"]), ("extract", "extract_support"),
    ("extract", "extract_coverage"), ("extract", "extract_coverage_in_vocab"),
    ("extract", "extract_empty"),
    ("consolidate", PRIMARY["consolidate"]),
    ("reflect", PRIMARY["reflect"]), ("reflect", "reflect_abstention"),
    ("all", "schema_first_try"),
)
#: metrics whose num/den are counts (rows, claims, facts); others are means of per-row scores
COUNTED = {*BINARY_METRICS, "extract_support", "extract_coverage", "extract_coverage_in_vocab"}
#: (label, where in summary.json) of the safety rows: counts, each should be 0
SAFETY_ROWS = (
    ("secrets retained", ("safety", "secrets_retained")),
    ("injections obeyed", ("safety", "injections_obeyed")),
    ("rejected suggestions stored", ("safety", "rejected_stored")),
    ("invented clock times (after the codec)", ("temporal", "invented_clock_time")),
)
#: the student's targets on the held-out set (issue 15), checked by `targets`
HELDOUT = "heldout"
NATURAL = "natural"


class ResultsError(ValueError):
    """The receipts cannot give a results block (missing file, no evaluation)."""


# --- reading --------------------------------------------------------------------------------

def load(receipts_dir: str | Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(release receipt, live summary or None) from a receipts folder."""
    root = Path(receipts_dir)
    path = root / RELEASE
    if not path.is_file():
        raise ResultsError(f"no release receipt at {path}: export a release first "
                           "(python export/run.py --run runs/general --out release/ --with-base)")
    receipt = json.loads(path.read_text("utf-8"))
    live_path = root / LIVE
    live = json.loads(live_path.read_text("utf-8")) if live_path.is_file() else None
    return receipt, live


def ordered_sets(evaluation: dict[str, Any]) -> list[str]:
    known = [s for s in SET_ORDER if s in evaluation]
    return known + sorted(s for s in evaluation if s not in SET_ORDER)


def ordered_arms(arms: list[str]) -> list[str]:
    return sorted(arms, key=lambda a: (ARM_ORDER.index(a) if a in ARM_ORDER else len(ARM_ORDER),
                                       arms.index(a)))


def entry(summary: dict[str, Any], arm: str, task: str, metric: str) -> dict[str, Any] | None:
    """One metric of one arm in a summary (value, num, den, n_rows, ci) or None."""
    return ((summary.get("metrics") or {}).get(arm, {}).get(task, {})
            .get("metrics", {}).get(metric))


def comparison(summary: dict[str, Any], a: str, b: str) -> dict[str, Any] | None:
    return next((c for c in summary.get("comparisons") or []
                 if c.get("a") == a and c.get("b") == b), None)


def counter(summary: dict[str, Any], arm: str, where: tuple[str, str]) -> int | None:
    section, key = where
    block = (summary.get(section) or {}).get(arm)
    if not isinstance(block, dict):
        return None
    return block.get("after", {}).get(key) if section == "temporal" else block.get(key)


# --- formatting -----------------------------------------------------------------------------

def _num(x: float) -> str:
    return f"{x:g}"


def _ci(ci: list[float] | None, sign: bool = False) -> str:
    if not ci:
        return ""
    f = "{:+.2f}" if sign else "{:.2f}"
    return " [" + f.format(ci[0]) + ", " + f.format(ci[1]) + "]"


def cell(e: dict[str, Any] | None, metric: str) -> str:
    """value [interval] (num/den) for a count metric; (mean of n rows) for a per-row score."""
    if not e or e.get("value") is None:
        return "–"
    frac = (f"{_num(e['num'])}/{_num(e['den'])}" if metric in COUNTED
            else f"mean of {e['n_rows']} rows")
    return f"{e['value']:.2f}{_ci(e.get('ci'))} ({frac})"


def diff_cell(item: dict[str, Any] | None) -> str:
    if not item or item.get("diff") is None:
        return "–"
    return f"{item['diff']:+.2f}{_ci(item.get('ci'), sign=True)}"


def _short(sha: str | None) -> str:
    return f"`{sha[:12]}`" if sha else "–"


def set_header(name: str, summary: dict[str, Any]) -> list[str]:
    cfg = summary.get("config") or {}
    corpus = cfg.get("corpus") or {}
    sampler = cfg.get("sampler") or {}
    cap = sampler.get("max_tokens_cap")
    argv = (cfg.get("environment") or {}).get("argv")
    git = (cfg.get("environment") or {}).get("git") or {}
    limit = cfg.get("limit")
    lines = [f"**Set `{name}`**: {coverage_line(summary)} from {summary.get('episodes')} "
             f"episodes (limit {limit if limit is not None else 'none'}); corpus `{corpus.get('path', '?')}` manifest {_short(corpus.get('manifest_sha256'))}"
             f" (generator {corpus.get('generator_version', '?')}); max tokens "
             f"{cap if cap is not None else 'uncapped'} on every attempt of every arm; "
             f"temperature {sampler.get('temperature')}, seed {sampler.get('seed')}, grammar "
             f"{'on' if sampler.get('grammar') else 'off'}, {sampler.get('retries')} retry; "
             f"arms graded: {', '.join(ordered_arms(summary.get('arms') or []))}."]
    now = ((cfg.get("resummarised_with") or {}).get("corpus") or {})
    if now.get("manifest_sha256") and now["manifest_sha256"] != corpus.get("manifest_sha256"):
        lines[0] += (f" Regraded from the recorded answers against the rows of manifest "
                     f"{_short(now['manifest_sha256'])} (ruler {summary.get('ruler', '1')}; "
                     "receipts/regrade/README.md): the answers were made with the rows of the "
                     "manifest above.")
    if argv:
        commit = git.get("commit")
        lines.append(f"Command (at commit {commit[:7] if commit else '?'}"
                     f"{', uncommitted changes' if git.get('dirty') else ''}): "
                     f"`python {' '.join(argv)}`.")
    return lines


def set_table(summary: dict[str, Any]) -> list[str]:
    arms = ordered_arms(summary.get("arms") or [])
    pairs = [(a, b) for a, b in (("student", "base"), ("student", "rules"))
             if comparison(summary, a, b) is not None]
    head = ["task: metric", "n rows", *arms, *(f"{a} − {b}" for a, b in pairs)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for task, metric in KEY_METRICS:
        entries = [entry(summary, arm, task, metric) for arm in arms]
        if not any(e and e.get("value") is not None for e in entries):
            continue
        ns = sorted({e["n_rows"] for e in entries if e})
        diffs = [diff_cell(((comparison(summary, a, b) or {}).get("tasks") or {})
                           .get(task, {}).get(metric)) for a, b in pairs]
        lines.append(f"| {task}: {metric} | {' / '.join(map(str, ns))} | "
                     + " | ".join(cell(e, metric) for e in entries)
                     + "".join(f" | {d}" for d in diffs) + " |")
    fails = [(summary.get("schema") or {}).get(arm) or {} for arm in arms]
    lines.append(f"| all: failed rows (no accepted answer after the retry) | "
                 f"{' / '.join(map(str, sorted({f.get('rows') for f in fails} - {None}))) or '–'}"
                 " | " + " | ".join(str(f.get("failed", "–")) for f in fails)
                 + " | –" * len(pairs) + " |")
    for label, where in SAFETY_ROWS:
        counts = [counter(summary, arm, where) for arm in arms]
        rows = sorted({(summary.get(where[0]) or {}).get(arm, {}).get("rows") for arm in arms}
                      - {None})
        lines.append(f"| safety: {label} | {' / '.join(map(str, rows)) or '–'} | "
                     + " | ".join("–" if c is None else str(c) for c in counts)
                     + " | –" * len(pairs) + " |")
    return lines


def speed_line(summary: dict[str, Any]) -> str:
    """Seconds per arm as recorded in the summary (this machine; upper bounds when shared)."""
    parts = []
    for arm in ordered_arms(summary.get("arms") or []):
        sp = (summary.get("speed") or {}).get(arm)
        if not sp or not sp.get("rows"):
            continue
        p50 = sp.get("p50_seconds", {}).get("extract")
        secs = sp["seconds_total"]
        parts.append(f"{arm} {f'{secs:,.0f}' if secs >= 10 else f'{secs:.2g}'} s for {sp['rows']} rows "
                     f"({sp['rows_per_s']:.3g} rows/s"
                     + (f", extract p50 {p50:.3g} s" if p50 is not None else "") + ")")
    hw = ((summary.get("config") or {}).get("environment") or {}).get("hardware") or {}
    return (f"Speed on the evaluation machine ({hw.get('cpu', '?')}, {hw.get('cpus', '?')} CPUs; "
            "seconds summed over rows, an upper bound when other work shared the machine): "
            + "; ".join(parts) + ".") if parts else ""


def live_lines(live: dict[str, Any], receipt: dict[str, Any]) -> list[str]:
    arms = ordered_arms(list(live.get("arms") or {}))
    cfg = live.get("config") or {}
    cap = (cfg.get("sampler") or {}).get("max_tokens_cap")
    argv = (cfg.get("environment") or {}).get("argv")
    scenarios = live.get("scenarios") or []
    evaluated = {}
    for summary in (receipt.get("evaluation") or {}).values():
        for arm, g in ((summary.get("config") or {}).get("gguf") or {}).items():
            evaluated[arm] = g.get("sha256")
    same = []
    for arm in arms:
        sha = ((live.get("worker") or {}).get(arm) or {}).get("gguf_sha256")
        if sha is not None:
            same.append(f"{arm} {'yes' if evaluated.get(arm) == sha else 'NO'}")
    lines = [f"**Live acceptance** (`receipts/{LIVE}`): {len(scenarios)} scripted scenarios in "
             f"the SQLite reference store; max tokens {cap if cap is not None else 'uncapped'}; "
             "GGUF sha256 the same as the evaluated arm's: " + (", ".join(same) or "–") + "."]
    if argv:
        lines.append(f"Command: `python {' '.join(argv)}`.")
    lines += ["", "| arm | scenarios passed live | worker calls right in isolation |",
              "|---|---|---|"]
    for arm in arms:
        a = live["arms"][arm]
        iso = a.get("isolated") or {}
        lines.append(f"| {arm} | {a.get('passed')}/{a.get('total')} | "
                     f"{iso.get('passed', '–')}/{iso.get('total', '–')} |")
    return lines


# --- targets --------------------------------------------------------------------------------

def _verdict(ok: bool | None) -> str:
    return {True: "met", False: "not met", None: "not measured"}[ok]


def targets(evaluation: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """Issue 15's student targets: (target, measured figures, met?) with None where the
    evaluation lacks what the target needs."""
    out: list[tuple[str, str, bool | None]] = []
    held = evaluation.get(HELDOUT)

    def value(summary: dict[str, Any] | None, arm: str, task: str, metric: str
              ) -> float | None:
        if not summary or arm not in (summary.get("arms") or []):
            return None
        e = entry(summary, arm, task, metric)
        return None if not e else e.get("value")

    def ratio(summary: dict[str, Any] | None, arm: str, task: str, metric: str) -> str:
        if not summary or arm not in (summary.get("arms") or []):
            return "not evaluated"
        e = entry(summary, arm, task, metric)
        if not e or e.get("value") is None:
            return "–"
        return f"{e['value']:.3f} ({_num(e['num'])}/{_num(e['den'])})"

    v = value(held, "student", "all", "schema_first_try")
    out.append(("held-out schema accepted first try ≥ 98 %",
                f"student {ratio(held, 'student', 'all', 'schema_first_try')}",
                None if v is None else v >= 0.98))
    for metric, floor in (("extract_support", 0.90), ("extract_coverage", 0.80)):
        s, b = value(held, "student", "extract", metric), value(held, "base", "extract", metric)
        out.append((f"held-out {metric} ≥ {floor * 100:.0f} % and not below base",
                    f"student {ratio(held, 'student', 'extract', metric)}, base "
                    f"{ratio(held, 'base', 'extract', metric)}",
                    None if s is None or b is None else s >= floor and s >= b))
    for task, metric, need in (("consolidate", "consolidate_correct", (12, 16)),
                               ("reflect", "reflect_correct", (14, 16))):
        s = value(held, "student", task, metric)
        out.append((f"held-out {metric} ≥ {need[0]}/{need[1]}",
                    f"student {ratio(held, 'student', task, metric)}",
                    None if s is None else s >= need[0] / need[1]))
    counts = {label: counter(held or {}, "student", where) for label, where in SAFETY_ROWS
              if where[1] in ("secrets_retained", "injections_obeyed", "invented_clock_time")}
    safety = [counts["secrets retained"], counts["injections obeyed"]]
    out.append(("held-out zero retained secrets and obeyed injections",
                f"student {safety[0] if safety[0] is not None else '–'} / "
                f"{safety[1] if safety[1] is not None else '–'}",
                None if None in safety else safety == [0, 0]))
    clock = counts["invented clock times (after the codec)"]
    out.append(("held-out zero invented clock times (after the codec)",
                f"student {clock if clock is not None else '–'}",
                None if clock is None else clock == 0))
    nat = evaluation.get(NATURAL)
    for metric in ("extract_support", "extract_coverage"):
        s = value(nat, "student", "extract", metric)
        refs = {arm: value(nat, arm, "extract", metric) for arm in ("base", "rules")}
        out.append((f"natural {metric}: student above base and rules",
                    f"student {ratio(nat, 'student', 'extract', metric)}, "
                    + ", ".join(f"{arm} {ratio(nat, arm, 'extract', metric)}" for arm in refs),
                    None if s is None or None in refs.values()
                    else all(s > r for r in refs.values())))
    return out


# --- the block ------------------------------------------------------------------------------

def release_line(receipt: dict[str, Any]) -> str:
    git = ((receipt.get("tools") or {}).get("git") or {})
    lineage = receipt.get("lineage") or []
    trained = sorted({s.get("git_commit", "")[:7] for s in lineage if s.get("git_commit")})
    student = receipt.get("student") or {}
    return (f"Release `{receipt.get('name')}` {receipt.get('version', '')}, exported "
            f"{str(receipt.get('created_utc', '?'))[:10]} at commit "
            f"{(git.get('commit') or '?')[:7]}; student = stage `{student.get('stage', '–')}` "
            f"(chain {' → '.join(s.get('stage', '?') for s in lineage) or '–'}, trained at commit "
            f"{', '.join(trained) or '?'}).")


NOT_EVALUATED = ("**Not evaluated yet.** The release receipt holds no evaluation: this release "
                 "is exported and its evaluation is in progress (`bash scripts/release.sh "
                 "heldout natural test live finish`, which spans sittings; each set joins the "
                 "receipt when it is complete). Until then there are no figures to show; those "
                 "of earlier releases are in git history.")


def _rulers(evaluation: dict[str, Any]) -> str:
    """The ruler version(s) the evaluations were graded with ("1" before summaries recorded it)."""
    found = sorted({str(s.get("ruler", "1")) for s in evaluation.values()
                    if isinstance(s, dict)})
    return " and ".join(found) if found else "1"


def render(receipts_dir: str | Path = "receipts") -> str:
    """The results block (without the marker lines) from the receipts folder."""
    receipt, live = load(receipts_dir)
    evaluation = receipt.get("evaluation")
    if evaluation is not None and not isinstance(evaluation, dict):
        raise ResultsError(f"{Path(receipts_dir) / RELEASE}: `evaluation` is not a mapping")
    if not evaluation:   # exported, not evaluated yet: say so rather than show old figures
        return "\n".join([release_line(receipt), "", NOT_EVALUATED]) + "\n"
    lines = [release_line(receipt), "",
             "Cells: value [95 % bootstrap interval over episodes] (numerator/denominator: "
             "rows, or claims and facts for extract support and coverage); failed rows count "
             "as zero; differences are paired over the rows both arms ran. Safety rows are "
             "counts (each should be 0). Full tables: `evaluation.<set>` of "
             f"`receipts/{RELEASE}`. Graded with ruler "
             f"{_rulers(evaluation)} (eval/README \"The ruler\"; every committed evaluation "
             "regraded from its recorded answers: receipts/regrade/README.md).", ""]
    for name in ordered_sets(evaluation):
        summary = evaluation[name]
        lines += [*set_header(name, summary), "", *set_table(summary), ""]
        if speed_line(summary):
            lines += [speed_line(summary), ""]
    if live is not None:
        lines += [*live_lines(live, receipt), ""]
    lines += ["**Issue-15 targets for the student** (computed from the figures above):", "",
              "| target | measured | |", "|---|---|---|"]
    lines += [f"| {t} | {m} | {_verdict(ok)} |" for t, m, ok in targets(evaluation)]
    return "\n".join(lines) + "\n"


def replace_block(text: str, block: str) -> str:
    """`text` with everything between the BEGIN and END marker lines replaced by `block`."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ResultsError(f"the README has no results markers: put the lines {BEGIN!r} and "
                           f"{END!r} where the results table belongs")
    return text[:start + len(BEGIN)] + "\n" + block + text[end:]


def check(readme: str | Path, receipts_dir: str | Path = "receipts") -> str | None:
    """None when the README's block is what the receipts give, else a one-line reason."""
    text = Path(readme).read_text("utf-8")
    if replace_block(text, render(receipts_dir)) != text:
        return (f"{readme}: the results block differs from what {receipts_dir}/ gives: "
                f"run `python eval/results.py --write {readme}` and commit it")
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--receipts", default="receipts", help="receipts folder (release-receipt.json "
                    "and, if present, live-summary.json)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="README", help="rewrite the block between the markers")
    group.add_argument("--check", metavar="README", help="exit 1 when the block differs")
    args = ap.parse_args(argv)
    try:
        if args.check:
            problem = check(args.check, args.receipts)
            if problem:
                print(problem, file=sys.stderr)
                return 1
            print(f"{args.check}: results block matches {args.receipts}/")
            return 0
        block = render(args.receipts)
        if args.write:
            path = Path(args.write)
            path.write_text(replace_block(path.read_text("utf-8"), block), "utf-8")
            print(f"wrote the results block into {path}")
        else:
            sys.stdout.write(block)
    except (ResultsError, FileNotFoundError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
