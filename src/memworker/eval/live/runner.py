"""Play scripted scenarios through the reference store with one worker per arm; grade them.

Every arm is a `memworker.inference.hmem.MemWorkerBackend` over the arm's generation backend
(`memworker.eval.runner.make_backend`: a GGUF through llama.cpp, Ollama, an OpenAI-compatible
server) or over `RulesBackend` for the rules arm (bound to each request by
`MemWorkerBackend`), with the evaluator's sampler (temperature 0, one seed, one context size,
the same max-tokens cap for every arm). Each scenario gets a fresh store in
`OUT/<arm>/<scenario>/store.db`; `calls.jsonl` beside it is the evaluator's log of every
worker call (inputs' sizes, output or error, attempts, seconds; credentials redacted).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import Any

from memworker import prompts
from memworker.eval.live import checks as C
from memworker.eval.live.store import LiveStore
from memworker.hashing import canonical_json, sha256_file, write_json
from memworker.inference import rules
from memworker.safety import redact

SUMMARY = "summary.json"


class RecordingWorker:
    """Delegates extract / consolidate / reflect to a MemWorkerBackend and records each call
    (inputs, output or error, attempts, seconds) for the isolated grades and the call log."""

    def __init__(self, worker: Any):
        self.worker = worker
        self.calls: list[dict[str, Any]] = []

    @property
    def last(self) -> Any:
        return self.worker.last

    def _call(self, task: str, record: dict[str, Any], fn: Any, *args: Any, **kw: Any) -> Any:
        started = time.perf_counter()
        record = {"task": task, **record}
        self.calls.append(record)
        try:
            out = fn(*args, **kw)
        except Exception as exc:
            record["error"] = f"{type(exc).__name__}: {exc}"
            attempts = getattr(exc, "attempts", None)
            record["attempts"] = len(attempts) if attempts is not None else None
            record["completion_tokens"] = ([a.completion_tokens for a in attempts]
                                           if attempts is not None else None)
            record["seconds"] = round(time.perf_counter() - started, 3)
            raise
        record["output"] = out
        last = self.worker.last
        record["attempts"] = len(last.attempts) if last is not None else None
        record["completion_tokens"] = ([a.completion_tokens for a in last.attempts]
                                       if last is not None else None)
        record["seconds"] = round(time.perf_counter() - started, 3)
        return out

    def extract(self, messages, existing=(), observed_at=None):
        existing = list(existing)
        return self._call("extract", {"existing": existing, "messages": len(messages)},
                          self.worker.extract, messages, existing, observed_at=observed_at)

    def consolidate(self, facts):
        facts = list(facts)
        return self._call("consolidate", {"facts": facts}, self.worker.consolidate, facts)

    def reflect(self, question, evidence, asked_at=None):
        evidence = list(evidence)
        return self._call("reflect", {"question": question, "evidence": evidence},
                          self.worker.reflect, question, evidence, asked_at=asked_at)


def identity(arm_kind: str, target: str) -> dict[str, Any]:
    """What must not change while a worker runs: its model file and the prompt templates,
    hashed from disk now (the rules arm: the rules module's source)."""
    templates = {name: sha256_file(prompts.prompt_dir() / f"{name}.txt")
                 for name in prompts.TEMPLATE_NAMES}
    out: dict[str, Any] = {"gguf_sha256": None, "prompt_sha256": templates}
    if arm_kind == "gguf":
        out["gguf_sha256"] = sha256_file(target)
    elif arm_kind == "rules":
        out["rules_sha256"] = sha256_file(rules.__file__)
    else:
        out["model"] = target   # served models: the name is all the evaluator can see
    return out


def _scrub(text: str, secrets: list[str]) -> str:
    text = redact(text)
    for secret in secrets:
        text = text.replace(secret, "[REDACTED]")
    return text


def play(scenario: dict[str, Any], worker: Any, folder: Path, arm_kind: str = "rules",
         target: str = "", user_id: str = "u1") -> dict[str, Any]:
    """Run one scenario into a fresh store in `folder`; its checks and isolated grades."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    rec = RecordingWorker(worker)
    store = LiveStore(folder / "store.db", rec, user_id=user_id)
    ctx: dict[str, Any] = {"identity_before": identity(arm_kind, target), "answers": [],
                           "active_before_injection": {}, "log": folder / "calls.jsonl"}
    isolated: list[dict[str, Any]] = []
    started = time.perf_counter()
    try:
        for session in scenario["sessions"]:
            store.add_episode(session["id"], session["messages"], session["at"])
            rows = {m["id"]: m for m in store.memories()}
            if session["injection"]:
                ctx["active_before_injection"][session["id"]] = [
                    m["id"] for m in store.memories(active=True)]
            n_before = len(rec.calls)
            # a failed call: its record holds the error, and the store is unchanged
            with contextlib.suppress(Exception):
                store.extract(session["id"], session["messages"], session["at"])
            call = rec.calls[-1] if len(rec.calls) > n_before else {"error": "no worker call"}
            ok, why = C.grade_extract_call(session, scenario, call, rows)
            isolated.append({"call": f"extract {session['id']}", "passed": ok, "why": why})
        if scenario["consolidate"] is not None:
            n_before = len(rec.calls)
            try:
                store.consolidate(scenario["consolidate"]["at"])
            except Exception as exc:  # noqa: BLE001
                ctx["consolidate_error"] = f"{type(exc).__name__}: {exc}"
            call = rec.calls[-1] if len(rec.calls) > n_before else None
            ok, why = C.grade_consolidate_call(call)
            isolated.append({"call": "consolidate", "passed": ok, "why": why})
        for q in scenario["questions"]:
            try:
                store.reflect(q["ask"], q["at"])
                ctx["answers"].append({})
            except Exception as exc:  # noqa: BLE001
                ctx["answers"].append({"error": f"{type(exc).__name__}: {exc}"})
            ok, why = C.grade_reflect_call(q, scenario, rec.calls[-1])
            isolated.append({"call": f"reflect {q['ask']}", "passed": ok, "why": why})
        seconds = time.perf_counter() - started
        with open(ctx["log"], "w", encoding="utf-8") as fh:
            for call in rec.calls:
                fh.write(_scrub(canonical_json(call).decode("utf-8"), scenario["secrets"]) + "\n")
        ctx["identity_after"] = identity(arm_kind, target)
        results = {name: C.CHECKS[name](store, scenario, ctx) for name in scenario["checks"]}
    finally:
        store.close()
    return {
        "passed": all(ok for ok, _ in results.values()),
        "checks": {name: ok for name, (ok, _) in results.items()},
        "why": {name: why for name, (_, why) in results.items()},
        "isolated": {"passed": sum(i["passed"] for i in isolated), "total": len(isolated),
                     "calls": isolated},
        "worker_calls": len(rec.calls),
        "failed_calls": sum(1 for c in rec.calls if c.get("error")),
        "seconds": round(seconds, 3),
        "identity": ctx["identity_after"],
    }


def run_arm(name: str, worker: Any, scenarios: list[dict[str, Any]], out: Path,
            arm_kind: str, target: str, progress: Any = None) -> dict[str, Any]:
    """Play the scenarios in order; `progress(arm, scenario, result)` after each one."""
    results = {}
    for scenario in scenarios:
        results[scenario["name"]] = play(scenario, worker, out / name / scenario["name"],
                                         arm_kind, target)
        if progress is not None:
            progress(name, scenario["name"], results[scenario["name"]])
    return aggregate(results)


def aggregate(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """An arm's totals over its scenario results (in the given order)."""
    return {"passed": sum(r["passed"] for r in results.values()), "total": len(results),
            "isolated": {"passed": sum(r["isolated"]["passed"] for r in results.values()),
                         "total": sum(r["isolated"]["total"] for r in results.values())},
            "scenarios": results}


def write_summary(out: Path, scenarios: list[dict[str, Any]], arms: dict[str, Any],
                  workers: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    summary = {"scenarios": [s["name"] for s in scenarios], "arms": arms, "worker": workers,
               "config": config}
    write_json(out / SUMMARY, summary)
    return summary


def table(summary: dict[str, Any]) -> str:
    """Markdown: one row per scenario, per arm `live` (PASS/FAIL, failed checks) and
    `isolated` (calls right / calls), then each arm's totals; what a summary lacks (a scenario an
    arm did not run, its isolated counts) shows as "–"."""
    arms = list(summary.get("arms", {}))
    lines = ["| scenario | " + " | ".join(f"{a} live | {a} isolated" for a in arms) + " |",
             "|---|" + "---|---|" * len(arms)]
    for name in summary.get("scenarios", []):
        cells = []
        for a in arms:
            r = summary["arms"][a].get("scenarios", {}).get(name)
            if r is None:
                cells += ["–", "–"]
                continue
            failed = [c for c, ok in r.get("checks", {}).items() if not ok]
            cells.append("PASS" if r["passed"] else "FAIL (" + ", ".join(failed) + ")")
            iso = r.get("isolated", {})
            cells.append(f"{iso.get('passed', '–')}/{iso.get('total', '–')}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    totals = []
    for a in arms:
        arm = summary["arms"][a]
        iso = arm.get("isolated", {})
        totals += [f"**{arm['passed']}/{arm['total']}** scenarios",
                   f"**{iso.get('passed', '–')}/{iso.get('total', '–')}** calls"]
    lines.append("| **all** | " + " | ".join(totals) + " |")
    return "\n".join(lines)
