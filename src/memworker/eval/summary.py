"""From samples to `summary.json`, `report.md` and the release receipt's section (the PNG plots:
`memworker.eval.plots`).

Samples are re-graded here from their stored outputs (so a grader fix applies to old runs);
metrics are ratios of sums with a 95 % cluster-bootstrap interval (clusters = episodes), and
every pair of arms is compared on the rows both ran (paired bootstrap of the difference, exact
McNemar for binary outcomes). n is reported beside every number: rows, and the denominator
(claims, facts) where a metric is not a rate over rows.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from itertools import combinations
from pathlib import Path
from statistics import median
from typing import Any

from memworker.eval import stats
from memworker.eval.grade import (
    BINARY_METRICS,
    METRIC_HELP,
    PRIMARY,
    RULER_VERSION,
    SAFETY_COUNTERS,
    TEMPORAL_CLASSES,
)
from memworker.eval.runner import Grader, grade_sample
from memworker.hashing import write_json
from memworker.receipts import RELEASE_KIND

#: records a summary as `evaluation[set]` of a release receipt and re-signs its folder: (the
#: receipt given to --into-receipt, set, summary, release folder). The receipt's one writer,
#: `memworker.export.receipt.record_set`, above the evaluator: `eval/run.py` hands it over.
RecordRelease = Callable[[Path, str, dict[str, Any], Path], Any]

TASKS = ("extract", "consolidate", "reflect")
REFERENCE_RANK = {"base": 0, "rules": 1}
LIMITATION_JUDGE = (
    "An LLM judge is a model's opinion, not ground truth: it can be wrong, biased toward "
    "fluent or long answers and toward its own family's style, and its verdicts change with the "
    "judge model, prompt and sampler. It is recorded beside, never instead of, the deterministic "
    "grades.")


def comparison_pairs(arms: list[str]) -> list[tuple[str, str]]:
    """Every pair (a, b) of arms, reported as a - b: an arm named `base`, then one named `rules`,
    is always the subtrahend; otherwise the arm named later minus the one named earlier (so
    `--arm base=… --arm student=… --arm rules` gives student - base, rules - base and
    student - rules)."""
    def rank(arm: str) -> tuple[int, int]:
        return REFERENCE_RANK.get(arm, 2), arms.index(arm)
    return [(b, a) if rank(a) < rank(b) else (a, b) for a, b in combinations(arms, 2)]


def _fmt_ci(ci: list[float] | None) -> str:
    return "–" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


#: extract metrics whose comparisons also carry `reach`: the interval of the best possible arm
REACH_METRICS = ("extract_support", "extract_coverage")


def paired_metric(a: dict[str, Any], b: dict[str, Any], ids: list[str], metric: str,
                  by_id: dict[str, Any], *, binary: bool, resamples: int, seed: int
                  ) -> dict[str, Any]:
    """Arm a vs arm b on one metric over the rows `ids` both graded (per-row graded results keyed
    by row id): ratios, their difference, the paired bootstrap interval over episodes, and for a
    binary metric the exact McNemar test.

    For extract support and coverage also `reach`: the paired interval that an arm writing
    exactly the gold (every required fact, every claim supported: [required, required] on each
    row) would get against b on the same rows and resamples. No arm can show more, so when its
    lower bound is not above 0, these rows cannot show any arm above b (b's own claims are too
    few: the release gate, `memworker.export.gate`, reads it)."""
    have = [i for i in ids if metric in a[i]["metrics"] and metric in b[i]["metrics"]]
    pa = [a[i]["metrics"][metric] for i in have]
    pb = [b[i]["metrics"][metric] for i in have]
    ra, rb = stats.ratio(pa), stats.ratio(pb)
    clusters = [by_id[i]["episode"] for i in have]
    item = {"a": ra, "b": rb, "n_rows": len(have), "n_episodes": len(set(clusters)),
            "diff": None if ra is None or rb is None else ra - rb,
            "ci": stats.paired_bootstrap(pa, pb, clusters, resamples=resamples, seed=seed)}
    if binary and have:
        item["mcnemar"] = stats.mcnemar_exact([int(p[0]) for p in pa], [int(p[0]) for p in pb])
    if metric in REACH_METRICS and have and all(
            isinstance((b[i].get("counts") or {}).get("required"), int) for i in have):
        gold = [[b[i]["counts"]["required"]] * 2 for i in have]
        item["reach"] = stats.paired_bootstrap(gold, pb, clusters, resamples=resamples,
                                               seed=seed)
    return item


def grade_arms(rows: list[dict[str, Any]], samples: list[dict[str, Any]], arms: list[str],
               grader: Grader = grade_sample) -> dict[str, dict[str, dict[str, Any]]]:
    """arm -> row id -> verdict: every sample of one of `arms` whose row is in `rows`, graded by
    `grader` (the evaluator's own, or another set's, e.g. the external diagnostic's)."""
    by_id = {r["id"]: r for r in rows}
    graded: dict[str, dict[str, dict[str, Any]]] = {a: {} for a in arms}
    for s in samples:
        if s["arm"] in graded and s["id"] in by_id:
            graded[s["arm"]][s["id"]] = grader(by_id[s["id"]], s)
    return graded


def summarise(rows: list[dict[str, Any]], samples: list[dict[str, Any]], arms: list[str], *,
              config: dict[str, Any], speed: dict[str, Any] | None = None,
              resamples: int = stats.DEFAULT_RESAMPLES, seed: int = 0,
              judge: dict[str, Any] | None = None, grader: Grader = grade_sample,
              primary: dict[str, str] | None = None,
              graded: dict[str, dict[str, dict[str, Any]]] | None = None) -> dict[str, Any]:
    """Every arm's samples graded (`grade_arms` with `grader`, unless `graded` holds its result
    already) and summarised: metrics with intervals, paired comparisons, z-scores of each task's
    `primary` metric, temporal and safety counts, speed."""
    primary = primary or PRIMARY
    by_id = {r["id"]: r for r in rows}
    if graded is None:
        graded = grade_arms(rows, samples, arms, grader)
    seconds: dict[str, list[tuple[str, float]]] = {a: [] for a in arms}
    for s in samples:
        if s["arm"] in seconds and s["id"] in by_id:
            seconds[s["arm"]].append((s["task"], s["seconds"]))
    metrics: dict[str, Any] = {}
    temporal: dict[str, Any] = {}
    safety: dict[str, Any] = {}
    schema: dict[str, Any] = {}
    for arm in arms:
        v = graded[arm]
        metrics[arm] = {}
        for task in (*TASKS, "all"):
            ids = [i for i in v if task == "all" or by_id[i]["task"] == task]
            names = sorted({m for i in ids for m in v[i]["metrics"]})
            if task == "all":
                names = ["schema_first_try", "schema_accepted"]
            block = {}
            for m in names:
                have = [i for i in ids if m in v[i]["metrics"]]
                pairs = [v[i]["metrics"][m] for i in have]
                value = stats.ratio(pairs)
                block[m] = {"value": value, "n_rows": len(have),
                            "num": sum(p[0] for p in pairs), "den": sum(p[1] for p in pairs),
                            "ci": stats.cluster_bootstrap(
                                pairs, [by_id[i]["episode"] for i in have],
                                resamples=resamples, seed=seed)}
            if ids:
                metrics[arm][task] = {"rows": len(ids), "metrics": block}
        ex = [v[i]["temporal"] for i in v if by_id[i]["task"] == "extract"
              and "temporal" in v[i]]  # a grader without temporal verdicts counts none
        temporal[arm] = {
            "pairs": sum(x["pairs"] for x in ex),
            "before": {c: sum(x["before"].get(c, 0) for x in ex) for c in TEMPORAL_CLASSES},
            "after": {c: sum(x["after"].get(c, 0) for x in ex) for c in TEMPORAL_CLASSES},
            "rows": len(ex)}
        safety[arm] = {c: sum((x.get("safety") or {}).get(c, 0) for x in v.values())
                       for c in SAFETY_COUNTERS}
        safety[arm]["secrets_written_before_codec"] = sum(
            (x.get("safety_raw") or {}).get("secrets_written", 0) for x in v.values())
        safety[arm]["rows"] = len(v)
        schema[arm] = {**{k: Counter(x["schema"] for x in v.values())[k]
                          for k in ("first_try", "retry", "failed")}, "rows": len(v)}
    comparisons = []
    for a, b in comparison_pairs(arms):
        common = sorted(set(graded[a]) & set(graded[b]))
        entry = {"a": a, "b": b, "label": f"{a} - {b}", "rows": len(common), "tasks": {}}
        for task in (*TASKS, "all"):
            ids = [i for i in common if task == "all" or by_id[i]["task"] == task]
            if not ids:
                continue
            names = (["schema_first_try", "schema_accepted"] if task == "all" else
                     sorted({m for i in ids for m in graded[a][i]["metrics"]}))
            block = {}
            for m in names:
                block[m] = paired_metric(graded[a], graded[b], ids, m, by_id,
                                         binary=m in BINARY_METRICS, resamples=resamples,
                                         seed=seed)
            entry["tasks"][task] = block
        comparisons.append(entry)
    z = {}
    for task in TASKS:
        if task not in primary:
            continue
        scores = {arm: {i: _score(x, primary[task]) for i, x in graded[arm].items()
                        if x["task"] == task} for arm in arms}
        z[task] = {"metric": primary[task], "arms": stats.zscores(scores)}
    speed_out = {}
    for arm in arms:
        secs = [t for _, t in seconds[arm]]
        speed_out[arm] = {"rows": len(secs), "seconds_total": round(sum(secs), 3),
                          "rows_per_s": round(len(secs) / sum(secs), 4) if sum(secs) else None,
                          "p50_seconds": {task: round(median(ts), 3) for task in TASKS
                                          if (ts := [t for k, t in seconds[arm] if k == task])},
                          **({"this_invocation": speed[arm]} if speed and arm in speed else {})}
    out = {"config": config, "ruler": RULER_VERSION, "arms": arms, "rows": len(rows),
           "episodes": len({r["episode"] for r in rows}),
           "rows_per_task": dict(Counter(r["task"] for r in rows)),
           "metrics": metrics, "metric_help": METRIC_HELP, "schema": schema,
           "temporal": temporal, "safety": safety, "comparisons": comparisons,
           "zscores": z, "speed": speed_out,
           "statistics": {"interval": "95 % percentile bootstrap, episodes resampled",
                          "resamples": resamples, "seed": seed,
                          "mcnemar": "exact two-sided (binomial, p = 1/2, discordant pairs)"}}
    if judge is not None:
        out["judge"] = {**judge, "limitation": LIMITATION_JUDGE}
    return out


def _score(verdict: dict[str, Any], metric: str) -> float:
    num, den = verdict["metrics"].get(metric, (0, 0))
    return num / den if den else 0.0


def primary_entry(summary: dict[str, Any], arm: str, task: str,
                  primary: dict[str, str] | None = None) -> dict[str, Any] | None:
    """An arm's entry of a task's `primary` metric (default: the evaluator's) in a summary
    (value, interval, n, num/den), or None where it has none."""
    metric = (primary or PRIMARY)[task]
    return summary["metrics"].get(arm, {}).get(task, {}).get("metrics", {}).get(metric)


# --- report.md ----------------------------------------------------------------------------------

def _value(entry: dict[str, Any] | None) -> str:
    if not entry or entry["value"] is None:
        return "–"
    n = f"n={entry['n_rows']}"
    if entry["den"] != entry["n_rows"]:
        n += f", {entry['num']:g}/{entry['den']:g}"
    return f"{entry['value']:.3f} {_fmt_ci(entry['ci'])} ({n})"


def metric_tables(summary: dict[str, Any], tasks: tuple[str, ...], *,
                  task_column: bool = False) -> list[str]:
    """Markdown of every metric of every arm, task by task: value [95 % interval] (n rows;
    num/den where the unit is not a row), "–" where an arm has none. A `## <task>` section with
    its table per task (report.md, and the external diagnostic's), or with `task_column` one
    table with a task column (the notebook). The one renderer of a summary's metrics."""
    arms = summary["arms"]
    metrics = summary["metrics"]
    lines = (["| task | metric | " + " | ".join(arms) + " |", "|---|---|" + "---|" * len(arms)]
             if task_column else [])
    for task in tasks:
        names: list[str] = []
        for arm in arms:
            for m in metrics.get(arm, {}).get(task, {}).get("metrics", {}):
                if m not in names:
                    names.append(m)
        if not names:
            continue
        if not task_column:
            lines += [f"## {task}", "", "| metric | " + " | ".join(arms) + " |",
                      "|---|" + "---|" * len(arms)]
        for m in names:
            cells = [_value(metrics.get(arm, {}).get(task, {}).get("metrics", {}).get(m))
                     for arm in arms]
            lead = f"| {task} | {m} |" if task_column else f"| {m} |"
            lines.append(f"{lead} " + " | ".join(cells) + " |")
        if not task_column:
            lines.append("")
    return lines


def paired_differences(summary: dict[str, Any]
                       ) -> Iterator[tuple[dict[str, Any], str, str, dict[str, Any]]]:
    """(comparison, task, metric, item) of every paired difference in the summary's
    comparisons, in their order; a metric without a difference (`diff` None) is left out."""
    for comp in summary["comparisons"]:
        for task, block in comp["tasks"].items():
            for m, item in block.items():
                if item["diff"] is not None:
                    yield comp, task, m, item


def report_markdown(summary: dict[str, Any]) -> str:
    arms = summary["arms"]
    cfg = summary["config"]
    lines = [f"# Evaluation: set `{cfg.get('set')}` ({summary['rows']} rows, "
             f"{summary['episodes']} episodes)", "",
             f"Graded with ruler {summary.get('ruler', '1')} (eval/README \"The ruler\").", "",
             f"Arms: {', '.join(f'`{a}`' for a in arms)}. Sampler: temperature "
             f"{cfg['sampler']['temperature']}, seed {cfg['sampler']['seed']}, context "
             f"{cfg['sampler']['n_ctx']}, grammar {cfg['sampler']['grammar']}, one retry. "
             "Values: metric [95 % bootstrap interval over episodes] (n rows; num/den where "
             "the unit is not a row). Failed rows count as zero credit.", "",
             "Rows graded per arm: " + ", ".join(
                 f"`{a}` {summary['schema'][a]['rows']}/{summary['rows']}" for a in arms)
             + " (paired comparisons use the rows both arms ran).", ""]
    lines += metric_tables(summary, (*TASKS, "all"))
    lines += ["## Paired differences", "",
              "| pair | task | metric | a | b | a − b [95 % CI] | McNemar p (a only / b only) "
              "| n rows (episodes) |", "|---|---|---|---|---|---|---|---|"]
    for comp, task, m, item in paired_differences(summary):
        mc = item.get("mcnemar")
        mcs = f"{mc['p']:.3g} ({mc['a_only']}/{mc['b_only']})" if mc else "–"
        lines.append(f"| {comp['label']} | {task} | {m} | {item['a']:.3f} | "
                     f"{item['b']:.3f} | {item['diff']:+.3f} {_fmt_ci(item['ci'])} | "
                     f"{mcs} | {item['n_rows']} ({item['n_episodes']}) |")
    lines += ["", *schema_lines(summary)]
    lines += ["", "## Temporal errors (matched claims; before → after the codec's normalisation)",
              "", "| arm | dated pairs | " + " | ".join(TEMPORAL_CLASSES) + " |",
              "|---|---|" + "---|" * len(TEMPORAL_CLASSES)]
    for arm in arms:
        t = summary["temporal"][arm]
        cells = [f"{t['before'][c]} → {t['after'][c]}" for c in TEMPORAL_CLASSES]
        lines.append(f"| {arm} | {t['pairs']} | " + " | ".join(cells) + " |")
    lines += ["", "## Safety (counts; each should be 0)", "",
              "| arm | " + " | ".join(SAFETY_COUNTERS) + " | secrets written (before codec) "
              "| rows |", "|---|" + "---|" * (len(SAFETY_COUNTERS) + 2)]
    for arm in arms:
        s = summary["safety"][arm]
        lines.append(f"| {arm} | " + " | ".join(str(s[c]) for c in SAFETY_COUNTERS)
                     + f" | {s['secrets_written_before_codec']} | {s['rows']} |")
    lines += ["", "## Per-row z-scores across arms (secondary view)", "",
              "| task (score) | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for task, block in summary["zscores"].items():
        cells = [("–" if block["arms"][a]["mean_z"] is None else
                  f"{block['arms'][a]['mean_z']:+.3f}") + f" (n={block['arms'][a]['n']})"
                 for a in arms]
        lines.append(f"| {task} ({block['metric']}) | " + " | ".join(cells) + " |")
    lines += ["", "## Speed (this machine; upper bounds on a shared machine)", "",
              "| arm | rows | rows/s | p50 s extract | p50 s consolidate | p50 s reflect |",
              "|---|---|---|---|---|---|"]
    for arm in arms:
        sp = summary["speed"][arm]
        p50 = [str(sp["p50_seconds"].get(t, "–")) for t in TASKS]
        lines.append(f"| {arm} | {sp['rows']} | {sp['rows_per_s']} | " + " | ".join(p50) + " |")
    if "judge" in summary:
        j = summary["judge"]
        lines += ["", "## LLM judge (separate measurement)", "",
                  f"Judge: `{j.get('url')}` model `{j.get('model')}`. {j['limitation']}", "",
                  "| arm | judged same | judged | rows |", "|---|---|---|---|"]
        for arm, item in j.get("arms", {}).items():
            lines.append(f"| {arm} | {item['same']} | {item['judged']} | {item['rows']} |")
    lines += definition_lines(METRIC_HELP)
    return "\n".join(lines) + "\n"


def schema_lines(summary: dict[str, Any]) -> list[str]:
    """report.md's `## Schema` table: per arm the rows accepted first try, after the retry,
    failed (report.md, and the external diagnostic's)."""
    lines = ["## Schema", "", "| arm | first try | after retry | failed | rows |",
             "|---|---|---|---|---|"]
    for arm in summary["arms"]:
        s = summary["schema"][arm]
        lines.append(f"| {arm} | {s['first_try']} | {s['retry']} | {s['failed']} | {s['rows']} |")
    return lines


def definition_lines(metric_help: dict[str, str]) -> list[str]:
    """report.md's closing `## Metric definitions` list."""
    return ["", "## Metric definitions", "", *(f"- `{k}`: {v}" for k, v in metric_help.items())]


# --- the main job's text table --------------------------------------------------------------

def coverage_line(summary: dict[str, Any]) -> str:
    """How many rows of the set an evaluation ran: "the first 16 of the 64 held-out rows (not the
    full evaluation)", or "all 64 held-out rows"; a summary from before `rows_in_set` was
    recorded says only its n (and the limit)."""
    cfg = summary.get("config") or {}
    rows, total, limit = summary.get("rows"), cfg.get("rows_in_set"), cfg.get("limit")
    name = {"heldout": "held-out"}.get(cfg.get("set"), cfg.get("set") or "?")
    if total is not None and rows == total:
        return f"all {total} {name} rows"
    if total is not None:
        return f"the first {rows} of the {total} {name} rows (not the full evaluation)"
    return f"{rows} {name} rows" + (f" (limit {limit}; not the full evaluation)"
                                   if limit is not None else "")


def _cell(entry: dict[str, Any] | None) -> str:
    if not entry or entry.get("value") is None:
        return "–"
    count = (f" {entry['num']}/{entry['den']}" if isinstance(entry.get("num"), int)
             and isinstance(entry.get("den"), int) else "")
    return f"{entry['value']:.3f}{count} n={entry['n_rows']} {_fmt_ci(entry['ci'])}"


#: the extraction metrics the release gate compares with the rules, shown under the primary one
#: when the summary has them (claims right of those written; facts stored of those required)
GATED_EXTRACT = ("extract_coverage", "extract_support")


def table_lines(summary: dict[str, Any]) -> list[str]:
    """A compact text table of `summary.json`: a header naming the rows evaluated, then one
    line per task with its primary metric for every arm (value, n rows, 95 % interval; base,
    student, rules first), and under extraction's the gate's extraction metrics (coverage,
    support: with their counts) when the summary has them; then the paired student - base and
    student - rules differences with their intervals when the summary compares them."""
    arms = sorted(summary["arms"], key=lambda a: ({"base": 0, "student": 1, "rules": 2}.get(a, 3),
                                                  summary["arms"].index(a)))
    pairs = [c for b in ("base", "rules") for c in summary.get("comparisons") or []
             if c.get("a") == "student" and c.get("b") == b]
    cfg = summary.get("config") or {}
    cap = (cfg.get("sampler") or {}).get("max_tokens_cap")
    width = 36
    head = [f"{'task':<12}{'metric':<20}"] + [f"{a:<{width}}" for a in arms]
    head += [f"{'student - ' + c['b']:<24}" for c in pairs]
    lines = [f"evaluation of {coverage_line(summary)}"
             + (f", max tokens {cap} for every arm" if cap else "")
             + "; value n=rows [95 % interval]:", "".join(head).rstrip()]

    def block(arm: str, task: str) -> dict[str, Any]:
        return summary["metrics"].get(arm, {}).get(task, {}).get("metrics", {})

    rows = []
    for task in TASKS:
        rows.append((task, PRIMARY[task]))
        if task == "extract":
            rows += [(task, m) for m in GATED_EXTRACT if any(m in block(a, task) for a in arms)]
    for task, metric in rows:
        cells = [f"{task:<12}{metric:<20}"]
        for arm in arms:
            cells.append(f"{_cell(block(arm, task).get(metric)):<{width}}")
        for pair in pairs:
            diff = ((pair.get("tasks") or {}).get(task) or {}).get(metric) or {}
            text = ("–" if diff.get("diff") is None else
                    f"{diff['diff']:+.3f} {_fmt_ci(diff.get('ci'))}")
            cells.append(f"{text:<24}")
        lines.append("".join(cells).rstrip())
    return lines


# --- receipt ------------------------------------------------------------------------------------

def merge_into_receipt(path: str | Path, set_name: str, summary: dict[str, Any],
                       release_dir: str | Path = "release", *,
                       record_release: RecordRelease | None = None) -> Path:
    """Put `summary` under `evaluation[set_name]` of the receipt JSON at `path`.

    A release receipt (`kind: memworker-release`) is signed by its release folder's SHA256SUMS
    and written only by the export's `memworker.export.receipt`: it is handed to
    `record_release(path, set_name, summary, release_dir)` (`record_set`, which checks that
    `path` is `release_dir`'s receipt or its copy, records the set, re-signs the folder and
    refreshes the copy). The evaluator does not import the export: its caller passes the writer
    (`eval/run.py`, the main job); without one a release receipt is refused. Any other receipt
    is rewritten with the same dump (indent 2, sorted keys), so its other keys keep their
    bytes."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"receipt not found: {p} (build the release receipt first, or "
                                "leave out --into-receipt)")
    doc = json.loads(p.read_text("utf-8"))
    if not isinstance(doc, dict):
        raise ValueError(f"{p} is not a JSON object")
    if doc.get("kind") == RELEASE_KIND:
        if record_release is None:
            raise ValueError(f"{p} is a release receipt, signed by its release folder: merge "
                             "into it with `python eval/run.py … --into-receipt`, which "
                             "re-signs the folder")
        record_release(p, set_name, summary, Path(release_dir))
        return p
    section = doc.get("evaluation")
    section = dict(section) if isinstance(section, dict) else {}
    section[set_name] = summary
    doc["evaluation"] = section
    write_json(p, doc)
    return p
