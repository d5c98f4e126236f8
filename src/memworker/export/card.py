"""The release's model card (`README.md`): YAML front matter for model hubs, then files, lineage,
corpus, evaluation and limitations. Every number is read from the release receipt (which copies
it from the stage receipts and the evaluator); none is typed here.

A receipt of format 2 or later (issue 50 item 6) also gets: **Intended use** (the codec,
temperature 0, the store's vocabulary, the worker the release ships), its hand-written-set and
live-acceptance figures at the head of the limitations, and **Grade your own extractor**
(`eval/answers.py`). A format-1 receipt (releases v1–v3) renders as it was released."""

from __future__ import annotations

import json
from typing import Any

from memworker.export import gate
from memworker.export import modelfile as mfile
from memworker.ontology import PREDICATES

CARD = "README.md"
#: the first receipt format whose card has the intended use, the natural and live figures in its
#: limitations and the grading section: the format whose gate reads them
CARD_FORMAT = gate.LIVE_FORMAT
#: hand-written sets whose figures head the limitations (the natural set is a test; natural-dev
#: was chosen on, and says so)
HAND_WRITTEN_SETS = (("natural", "the hand-written natural set (a test: never trained or "
                      "chosen on)"),
                     ("natural-dev", "natural-dev (hand-written; designs and thresholds were "
                      "chosen on it, so it flatters)"))


def _num(value: Any, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n} B"


def _metric_rows(summary: dict[str, Any]) -> list[str]:
    """One line per arm, task and metric of an evaluator summary (`summary.json`'s `metrics`:
    arm -> task -> {"metrics": {name: {value, num, den, n_rows, ci}}})."""
    rows = []
    for arm, tasks in summary["metrics"].items():
        for task, entry in tasks.items():
            for name, m in sorted((entry.get("metrics") or {}).items()):
                if not isinstance(m, dict) or "value" not in m:
                    continue
                ci = m.get("ci")
                interval = f"[{_num(ci[0])}, {_num(ci[1])}]" if ci else "–"
                count = f" ({_num(m['num'])}/{m['den']})" if m.get("den") is not None else ""
                rows.append(f"| {arm} | {task} | {name} | {_num(m['value'])}{count} | "
                            f"{interval} | {m.get('n_rows', '–')} |")
    return rows


def _gate(gate: Any) -> list[str]:
    if not isinstance(gate, dict):
        return ["Not recorded."]
    out = [f"Verdict: **{gate.get('verdict')}**. Rule: {gate.get('rule')}.", ""]
    tasks = gate.get("tasks")
    if isinstance(tasks, dict) and tasks:
        out += ["Tasks: " + "; ".join(
            f"{set_name}: " + ", ".join(f"{task} {status}" for task, status in block.items())
            for set_name, block in tasks.items() if isinstance(block, dict)) + ".", ""]
    checks = gate.get("checks") or []
    if checks:
        out += ["| set | versus | task | metric | check | student | reference | difference "
                "[95 % CI] | n rows | status |", "|---|---|---|---|---|---|---|---|---|---|"]
        for c in checks:
            ci = c.get("ci")
            interval = "–" if ci is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"
            diff = "–" if c.get("diff") is None else f"{c['diff']:+.3f} {interval}"
            out.append(f"| {c['set']} | {c['versus']} | {c['task']} | {c['metric']} | "
                       f"{c.get('check') or '–'} | {_num(c.get('student'))} | "
                       f"{_num(c.get('reference'))} | {diff} | {_num(c.get('n_rows'))} | "
                       f"{c['status']} |")
    out += [f"- waiver: {w.get('metric')} on {w.get('set')}: {w.get('reason')}"
            for w in gate.get("waivers") or [] if isinstance(w, dict)]
    out += [f"- {p}" for p in gate.get("problems") or []]
    return out


def _evaluation(evaluation: Any) -> list[str]:
    if not evaluation:
        return ["Not evaluated yet: `python eval/run.py … --into-receipt` fills this section of "
                "`release-receipt.json` and rewrites this card."]
    out: list[str] = []
    rest: dict[str, Any] = {}
    for set_name, summary in sorted(evaluation.items()):
        if isinstance(summary, dict) and isinstance(summary.get("metrics"), dict):
            out += [f"Set `{set_name}` ({summary.get('rows', '?')} rows; 95 % bootstrap "
                    "intervals over episodes; failed rows count as zero):", "",
                    "| arm | task | metric | value | 95 % CI | n rows |",
                    "|---|---|---|---|---|---|", *_metric_rows(summary), ""]
        else:
            rest[set_name] = summary
    if rest:
        rows = []

        def walk(prefix: str, value: Any) -> None:
            if isinstance(value, dict):
                for key in sorted(value):
                    walk(f"{prefix}.{key}" if prefix else str(key), value[key])
            elif isinstance(value, (int, float, str, bool)) or value is None:
                rows.append(f"| `{prefix}` | {_num(value)} |")
            else:
                rows.append(f"| `{prefix}` | `{json.dumps(value)[:120]}` |")

        walk("", rest)
        out += ["| measure | value |", "|---|---|", *rows[:80]]
    return out


def _intended_use(receipt: dict[str, Any]) -> list[str]:
    worker = {**mfile.DEFAULT_WORKER, **(receipt.get("worker") or {})}
    return ["## Intended use", "",
            "- **What for:** the memory worker of a local agent-memory store (the `hmem` "
            "library): it extracts evidence-backed facts from conversation events, consolidates "
            "supported facts into observations, and answers a question from retrieved evidence "
            "citing it (or abstains).",
            "- **How to call it:** through memworker's codec (`memworker.inference`; in a store, "
            "`MemWorkerBackend.from_release(\"<this folder>\")`), which constrains every answer "
            "to the request's JSON schema and validates it before the store sees it. Free "
            "generation is not validated and not supported.",
            "- **Sampling:** temperature 0, seed 0, repeat penalty 1 (the Modelfile sets them); "
            "every figure below was measured that way.",
            f"- **The worker this release ships:** {mfile.worker_words(worker)}"
            + (" (named in the Modelfile's `# memworker worker:` comment, which the store's "
               "worker reads)" if mfile.worker_line(worker) else "") + ".",
            f"- **Vocabulary:** the store's ontology, {len(PREDICATES)} predicates "
            "(`memworker.ontology.PREDICATES`); a fact no predicate fits is not extracted. "
            "Subjects are the user or a person named with their relationship to the user.",
            "- **Not for:** general chat, facts about the world, or any decision about a person "
            "without a human reading the evidence the claim quotes.", ""]


def _ratio_text(item: Any) -> str:
    if not isinstance(item, dict) or item.get("a") is None:
        return "–"
    ci = item.get("ci")
    ref = "–" if item.get("b") is None else f"{item['b']:.3f}"
    diff = ("" if item.get("diff") is None or not ci else
            f", difference {item['diff']:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]")
    return f"{item['a']:.3f} against the rules' {ref}{diff}"


def _hand_written_limits(receipt: dict[str, Any]) -> list[str]:
    """The natural sets' extraction and the live acceptance, from the receipt, as limitations."""
    out = []
    evaluation = receipt.get("evaluation") or {}
    for set_name, words in HAND_WRITTEN_SETS:
        comp = gate.comparison(evaluation.get(set_name), "student", "rules")
        extract = ((comp or {}).get("tasks") or {}).get("extract") or {}
        if not extract:
            out.append(f"on {words}: not evaluated in this release")
            continue
        cov = extract.get("extract_coverage") or {}
        out.append(f"on {words}, {cov.get('n_rows', '–')} extract rows: support "
                   f"{_ratio_text(extract.get('extract_support'))}; coverage "
                   f"{_ratio_text(cov)} (paired 95 % intervals over episodes): on "
                   "conversation nobody here templated the student stores a small share of "
                   "the facts a reader would")
    arms = gate.live_passed(receipt.get("live"))
    if arms:
        out.append("live acceptance inside a small hmem-shaped store (`eval/live.py`): "
                   + "; ".join(f"{arm} passes {passed} of {total} scenarios"
                               for arm, (passed, total) in sorted(arms.items())))
    else:
        out.append("live acceptance: not recorded in this release")
    return out


def _grade_your_own() -> list[str]:
    return ["## Grade your own extractor", "",
            "The figures above come from memworker's evaluator. To put another extractor (a "
            "person, a bigger model, another memory system) on the same ruler, write one JSON "
            "line per extract row of a set, `{\"id\": ROW_ID, \"output\": {\"claims\": "
            "[...]}}` in the canonical contract (`schemas/extract_output.schema.json`), and "
            "grade it with no model run:", "",
            "    python eval/answers.py --set natural-dev --answers mine.jsonl --out /tmp/mine "
            "--name me", "",
            "`--against receipts/eval/natural-dev/release:student` pairs it with this release's student "
            "on the same rows. Malformed lines, unknown ids and quotes not in their event are "
            "refused with the line and the field.", ""]


def render(receipt: dict[str, Any]) -> str:
    base = receipt.get("base") or {}
    student = receipt.get("student")
    tags = ["memworker", "memory-worker", "information-extraction", "gguf", "q8_0"]
    if student:
        tags.append("lora")
    front = ["---", f"base_model: {base.get('hf_repo')}", f"license: {receipt.get('license')}",
             "tags:", *[f"- {t}" for t in tags], "pipeline_tag: text-generation",
             "library_name: gguf", "---", ""]
    lines = [*front, f"# {receipt.get('name')}", ""]
    if student:
        lines += [f"The memory worker of the memworker pipeline: stage `{student['stage']}` "
                  f"LoRA adapter merged ({student['merge']['dtype']}) into "
                  f"`{base.get('hf_repo')}` and converted to {receipt['export']['outtype']} "
                  "GGUF with llama.cpp's converter. Call it through memworker's codec "
                  "(schema-constrained, validated); the Modelfile serves it with Ollama:", "",
                  "    ollama create mem-extractor -f Modelfile", ""]
    else:
        lines += [f"The base `{base.get('hf_repo')}` through memworker's export path (no "
                  "adapter), for matched evaluation.", ""]
    current = gate.release_format(receipt) >= CARD_FORMAT
    if current and student:
        lines += _intended_use(receipt)
    lines += ["## Files", "", "| file | size | sha256 |", "|---|---|---|"]
    for rel, art in sorted((receipt.get("artifacts") or {}).items()):
        if rel != CARD:
            lines.append(f"| `{rel}` | {_size(art['bytes'])} | `{art['sha256'][:16]}…` |")
    lines += ["", "`sha256sum -c SHA256SUMS` checks them; `python export/verify.py <this folder>` "
              "also loads the GGUF and runs one constrained request.", ""]
    if receipt.get("lineage"):
        lines += ["## Training lineage", "",
                  "| stage | steps | final train loss | val loss | train rows | tokens/s | "
                  "receipt sha256 |", "|---|---|---|---|---|---|---|"]
        for st in receipt["lineage"]:
            res = st.get("result") or {}
            lines.append(f"| {st['stage']} | {_num(res.get('global_step'))} | "
                         f"{_num(res.get('final_train_loss'))} | {_num(res.get('val_loss'))} | "
                         f"{_num((st.get('rows') or {}).get('train'))} | "
                         f"{_num(res.get('tokens_per_s'), 1)} | `{st['receipt_sha256'][:16]}…` |")
        lines.append("")
    corpus = receipt.get("corpus")
    if corpus:
        held = corpus.get("heldout") or {}
        lines += ["## Corpus", "", f"- corpus `{corpus.get('corpus')}`, manifest sha256 "
                  f"`{corpus.get('manifest_sha256')}`",
                  f"- held-out set: {_num(held.get('rows'))} rows, sha256 "
                  f"`{held.get('sha256')}`" if held else f"- held-out set: {corpus.get('note')}",
                  f"- labels: {corpus.get('label_method')}",
                  *[f"- limit: {x}" for x in corpus.get("label_limits") or []], ""]
    limits = [*(_hand_written_limits(receipt) if current and student else []),
              *(receipt.get("known_limitations") or [])]
    lines += ["## Evaluation", "", *_evaluation(receipt.get("evaluation")), "",
              "## Release gate", "", *_gate(receipt.get("gate")), "",
              "## Known limitations", "", *[f"- {x}" for x in limits], ""]
    if current and student:
        lines += _grade_your_own()
    return "\n".join(lines)
