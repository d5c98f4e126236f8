"""The release's model card (`README.md`): YAML front matter for model hubs, then files, lineage,
corpus, evaluation and limitations. Every number is read from the release receipt (which copies
it from the stage receipts and the evaluator); none is typed here."""

from __future__ import annotations

import json
from typing import Any

CARD = "README.md"


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
    lines += ["## Evaluation", "", *_evaluation(receipt.get("evaluation")), "",
              "## Release gate", "", *_gate(receipt.get("gate")), "",
              "## Known limitations", "", *[f"- {x}" for x in receipt.get("known_limitations")
                                             or []], ""]
    return "\n".join(lines)
