"""Stored (arm, scenario) results of `eval/live.py`, so that arms can run at different times
into one summary and an interrupted run resumes.

Each finished pair is written at once (atomically) to `OUT/results/<arm>/<scenario>.json` with
the identity it was made under: what the arm's outputs depend on (the model's bytes: a GGUF's
sha256 and the llama-cpp-python version; the rules module's sha256; a served model's spec), the
scenario (the scenario file's sha256 and the scenario's own canonical sha256), the sampler
(temperature, seed, n_ctx, grammar, retries, max-tokens cap; llama.cpp threads for GGUF arms,
since no measurement here shows outputs independent of them), the prompt template sha256s
(`memworker.prompts.template_hashes`) and the sha256 of every source file on the result's path
(codec, schemas, grammar, hmem, backends, the live store, checks and runner: `CODE_FILES`).

A rerun reuses a pair whose stored identity equals the current one and runs the rest; a stored
pair whose identity differs stops the run before anything is played (`StaleResult`), naming
what differs. The summary is built from the stored results of the arms named on the command
line."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from memworker.eval.runner import Arm, EvalError, Sampler, sampler_doc
from memworker.hashing import sha256_file, sha256_json
from memworker.inference import hybrid, rules, turn_gate
from memworker.inference.backends import default_threads
from memworker.prompts import template_hashes

RESULTS = "results"
#: source files (relative to the memworker package) whose code decides a live result
CODE_FILES = (
    "contracts.py", "hashing.py", "prompts.py", "safety.py", "spans.py", "temporal.py",
    "textnorm.py", "verify.py", "wire.py",
    "inference/backends.py", "inference/codec.py", "inference/grammar.py",
    "inference/greedy_grammar.py", "inference/hmem.py", "inference/hybrid.py",
    "inference/kv_prefix.py",
    "inference/llama_ext.py", "inference/rules.py", "inference/schema.py",
    "eval/grade.py",
    "eval/live/checks.py", "eval/live/runner.py", "eval/live/scenarios.py",
    "eval/live/store.py",
)
_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


class StaleResult(EvalError):
    """A stored result was made under another identity; the message says what to do."""


def code_hashes() -> dict[str, str]:
    root = Path(__file__).resolve().parents[2]
    files = [*CODE_FILES, *sorted(p.relative_to(root).as_posix()
                                  for p in (root / "schemas").glob("*.json"))]
    return {f: sha256_file(root / f) for f in files if (root / f).is_file()}


def arm_identity(arm: Arm, sampler: Sampler) -> dict[str, Any]:
    """The part of a pair's identity shared by all of an arm's scenarios (hashed now)."""
    model: dict[str, Any] = {"kind": arm.kind}
    if arm.claim_gate is not None:  # (absent when ungated: results stored before gates match)
        model["claim_gate"] = arm.claim_gate
    if arm.propose:  # (absent when not proposing: results stored before proposing match)
        model["propose"] = True
    if arm.turn_gate is not None:  # (absent without one: results stored before it match)
        model["turn_gate"] = arm.turn_gate
        model["turn_gate_sha256"] = sha256_file(turn_gate.DEFAULT_WEIGHTS)
    # the rules settings the arm has (absent when off: results stored before them match)
    model.update({k: v for k, v in hybrid.settings_of(arm).items() if v != "none"})
    sampler_record = sampler_doc(sampler)  # later fields at their defaults left out, so results
    threads = sampler_record.pop("threads")  # stored before those fields still match
    if arm.kind == "gguf":
        import llama_cpp

        model["gguf_sha256"] = sha256_file(arm.target)
        model["llama_cpp"] = getattr(llama_cpp, "__version__", None)
        sampler_record["threads"] = threads or default_threads(Path(arm.target).stat().st_size)
    elif arm.kind == "rules":
        model["rules_sha256"] = sha256_file(rules.__file__)
    else:
        model["spec"] = arm.spec   # served models: the name is all the evaluator can see
    return {"model": model, "sampler": sampler_record, "prompt_sha256": template_hashes(),
            "code_sha256": code_hashes()}


def pair_identity(base: dict[str, Any], scenario_file: str | Path,
                  scenario: dict[str, Any]) -> dict[str, Any]:
    return {**base, "scenario_file_sha256": sha256_file(scenario_file),
            "scenario_sha256": sha256_json(scenario)}


def result_path(out: Path, arm: str, scenario: str) -> Path:
    if not set(scenario) <= _SAFE or scenario.startswith("."):
        raise EvalError(f"scenario name {scenario!r}: use letters, digits, '-', '_' and '.'")
    return out / RESULTS / arm / f"{scenario}.json"


def save(out: Path, arm: Arm, scenario: str, ident: dict[str, Any],
         result: dict[str, Any], wall_seconds: float) -> Path:
    """Write one finished pair atomically (a temporary file, then a rename)."""
    path = result_path(out, arm.name, scenario)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    doc = {"arm": arm.name, "spec": arm.spec, "scenario": scenario, "identity": ident,
           "wall_seconds": round(wall_seconds, 3), "result": result}
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def load(out: Path, arm: str, scenario: str) -> dict[str, Any] | None:
    path = result_path(out, arm, scenario)
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text("utf-8"))
    except json.JSONDecodeError:
        raise EvalError(f"{path} is not JSON; the file is damaged (delete it to run that "
                        "scenario again, or pass --fresh)") from None
    return doc


def differences(stored: dict[str, Any], current: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two identities."""
    out = []
    for key in sorted(set(stored) | set(current)):
        a, b = stored.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


def stale_error(out: Path, stale: dict[str, list[str]]) -> StaleResult:
    """One line: which stored results differ from the current identity, and in what.
    `stale` maps `arm/scenario` to its differing keys (`differences`)."""
    keys = sorted({k for diff in stale.values() for k in diff})
    code = [k.removeprefix("code_sha256.") for k in keys if k.startswith("code_sha256.")]
    other = [k for k in keys if not k.startswith("code_sha256.")]
    what = ", ".join(other + [f"code {c}" for c in code])
    pairs = sorted(stale)
    where = ", ".join(pairs[:4]) + (f" and {len(pairs) - 4} more" if len(pairs) > 4 else "")
    hint = " (only code differs: --accept-code-change reuses them)" if not other else ""
    return StaleResult(f"{len(pairs)} stored result(s) in {out / RESULTS} ({where}) were made "
                       f"under another identity: {what} differ{hint}; pass --fresh to discard "
                       f"{out}'s stored results, or use another --out")


def discard(out: Path) -> None:
    shutil.rmtree(out / RESULTS, ignore_errors=True)
