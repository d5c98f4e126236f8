"""Optional LLM judge through an OpenAI-compatible endpoint: a separate, semantic measurement.

For every accepted answer the judge model sees the task, the reference answer (the row's gold)
and the arm's answer, and says `same` or `different` (grammar-constrained JSON). Verdicts go to
`judge.jsonl` (resumable like samples.jsonl) and to the summary's `judge` section together with
its limitation (`memworker.eval.summary.LIMITATION_JUDGE`). The deterministic grades never use it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from memworker.hashing import canonical_json
from memworker.inference.backends import OpenAICompatBackend
from memworker.inference.grammar import schema_to_gbnf

JUDGE_FILE = "judge.jsonl"
JUDGE_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["verdict"],
                "properties": {"verdict": {"enum": ["same", "different"]}}}
JUDGE_SYSTEM = ("You grade answers of a memory worker. Compare the candidate answer with the "
                "reference answer for the same task. Say \"same\" when the candidate states the "
                "same facts (wording, order and formatting may differ) and nothing that "
                "contradicts the reference; otherwise say \"different\". Answer with JSON only: "
                "{\"verdict\": \"same\" | \"different\"}.")


def judge_messages(row: dict[str, Any], output: dict[str, Any]) -> list[dict[str, str]]:
    user = (f"Task: {row['task']}\n\nReference answer:\n"
            f"{json.dumps(row['gold'], ensure_ascii=False, sort_keys=True)}\n\n"
            f"Candidate answer:\n{json.dumps(output, ensure_ascii=False, sort_keys=True)}")
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


def judge_one(backend: Any, row: dict[str, Any], output: dict[str, Any], *, seed: int = 0,
              grammar: str | None = None) -> dict[str, Any]:
    grammar = grammar or schema_to_gbnf(JUDGE_SCHEMA)
    started = time.perf_counter()
    gen = backend.generate(judge_messages(row, output), schema=JUDGE_SCHEMA, grammar=grammar,
                           max_tokens=16, temperature=0.0, seed=seed)
    verdict = None
    try:
        doc = json.loads(gen.text)
        if isinstance(doc, dict) and doc.get("verdict") in ("same", "different"):
            verdict = doc["verdict"]
    except json.JSONDecodeError:
        pass
    return {"verdict": verdict, "raw": gen.text, "finish_reason": gen.finish_reason,
            "seconds": round(time.perf_counter() - started, 4)}


def run_judge(url: str, model: str, rows: list[dict[str, Any]], samples: list[dict[str, Any]],
              out_dir: Path, *, seed: int = 0) -> dict[str, Any]:
    """Judge every accepted sample not judged yet; return the summary's `judge` section."""
    backend = OpenAICompatBackend(url, model=model)
    grammar = schema_to_gbnf(JUDGE_SCHEMA)
    path = out_dir / JUDGE_FILE
    done = {}
    if path.is_file():
        for line in path.read_bytes().splitlines():
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                continue
            done[(item["arm"], item["id"])] = item
    by_id = {r["id"]: r for r in rows}
    with open(path, "ab") as fh:
        for s in samples:
            key = (s["arm"], s["id"])
            if s["output"] is None or key in done or s["id"] not in by_id:
                continue
            item = {"arm": s["arm"], "id": s["id"],
                    **judge_one(backend, by_id[s["id"]], s["output"], seed=seed,
                                grammar=grammar)}
            fh.write(canonical_json(item) + b"\n")
            fh.flush()
            done[key] = item
    arms: dict[str, dict[str, int]] = {}
    for s in samples:
        a = arms.setdefault(s["arm"], {"same": 0, "different": 0, "unparsed": 0, "judged": 0,
                                       "rows": 0})
        a["rows"] += 1
        item = done.get((s["arm"], s["id"]))
        if item is None:
            continue
        a["judged"] += 1
        a[item["verdict"] or "unparsed"] += 1
    return {"url": url, "model": model, "seed": seed, "arms": arms,
            "note": "failed rows are not judged (they count as rows, not as judged)"}
