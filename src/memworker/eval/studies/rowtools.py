"""The rows helpers the regrading studies share (`eval/studies/hybrid.py`,
`eval/studies/confidence.py`, `claims.py`, `misses.py`): an evaluation folder's config, rows and
samples (`read_folder`), a model sample's kept extract claims scored from its own token
log-probabilities (`kept_claim_stats`), the unsure ones dropped (`surest`), and the hybrid's sample
of a row composed from a rules and a model sample of it (`compose_row`: the two verified wire
answers merged by a policy, decoded by the same codec and graded by the same grader). No model runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memworker import wire
from memworker.eval.runner import SAMPLES, EvalError, grade_sample, load_eval_rows, read_samples
from memworker.hashing import sha256_file
from memworker.inference import codec
from memworker.inference.gate import (
    SCORES,
    VERIFIER,
    Fields,
    GateError,
    parts_fields,
    turn_parts,
)
from memworker.inference.hybrid import MERGES, claim_limit, falls_back, merge_extract
from memworker.inference.schema import build_schema
from memworker.turns import asked


def folder_corpus(config: dict[str, Any], where: str | Path,
                  corpus: str | Path | None = None) -> str | Path:
    """The corpus an evaluation folder's rows are read from: the path its config.json recorded
    (relative to where the evaluation ran), or `corpus`, a copy frozen elsewhere (a clone has no
    `data/`: `python corpus/build.py --natural corpus/natural-dev --out DIR` rebuilds it), which
    must be the same corpus: its manifest's sha256 is the one the folder recorded."""
    recorded = config.get("corpus") or {}
    if corpus is None:
        if not recorded.get("path"):
            raise EvalError(f"{where} names no corpus path")
        return recorded["path"]
    manifest = Path(corpus) / "manifest.json"
    if not manifest.is_file():
        raise EvalError(f"--corpus {corpus}: no manifest.json there")
    got = sha256_file(manifest)
    if got != recorded.get("manifest_sha256"):
        raise EvalError(f"--corpus {corpus}: its manifest sha256 {got[:12]}… is not the "
                        f"{str(recorded.get('manifest_sha256'))[:12]}… {where} was evaluated on")
    return corpus


def read_folder(out_dir: Path, corpus: str | Path | None = None
                ) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """(config, rows of its set, samples) of an `eval/run.py` folder: its config.json names the
    set and the corpus the rows are read from (or `corpus`: `folder_corpus`); EvalError when it
    is not such a folder."""
    config_path = out_dir / "config.json"
    if not config_path.is_file():
        raise EvalError(f"{out_dir}: no config.json (not an eval/run.py folder)")
    config = json.loads(config_path.read_text("utf-8"))
    rows = load_eval_rows(folder_corpus(config, config_path, corpus), config["set"])
    return config, rows, read_samples(out_dir / SAMPLES)


#: the hybrid's policies per task (`compose_row`; eval/studies/hybrid.py describes each)
EXTRACT_POLICIES = MERGES
OTHER_POLICIES = ("rules", "model", "derived")
#: reflect only: the model's answer, or the rules' where it abstains and they answer from a memory
#: holding every content word of the question (`memworker.inference.hybrid.falls_back`)
REFLECT_POLICIES = (*OTHER_POLICIES, "fallback")


def kept_claim_stats(sample: dict[str, Any], inputs: dict[str, Any] | None = None
                     ) -> list[Fields] | None:
    """Field statistics of each claim in `sample["output"]` (the codec's kept claims, in order),
    or None when the sample has none to score (failed, or no log-probabilities recorded). The
    claim scoring is the release's claim gate's (`memworker.inference.gate`).

    A sample in the turns form (`eval/run.py --extract-form turns`) is scored from each turn's
    accepted generation (its own tokens): the claims each turn kept, joined in turn order, less
    those the merge dropped (a repeat across turns) and those beyond the contract's limit. Its
    turns' event indices come from `inputs` (the row's input). A sample the gate already ran on
    (`eval/run.py --claim-gate`) gives the statistics of the claims the gate kept."""
    if sample.get("output") is None:
        return None
    gone = set((sample.get("gate") or {}).get("dropped", []))
    n_out = len(sample["output"]["claims"]) + len(gone)
    try:
        if sample.get("turns") is not None:
            if inputs is None:
                raise EvalError(f"{sample['id']}: a turns-form sample needs its row's input")
            parts = turn_parts(sample["turns"],
                               asked(inputs["events"], sample.get("extract_form") or "turns"),
                               sample["id"])
        else:
            attempt = sample["attempts"][-1]
            parts = [(attempt["raw"], attempt.get("token_logprobs"), "")]
        fields = parts_fields(parts, sample["diagnostics"], n_out, sample["id"])
    except GateError as exc:
        raise EvalError(str(exc)) from None
    return None if fields is None else [f for n, f in enumerate(fields) if n not in gone]


def _filtered(sample: dict[str, Any], keep: list[bool]) -> dict[str, Any]:
    return {**sample,
            "output": {**sample["output"], "claims": [c for c, k in zip(
                sample["output"]["claims"], keep, strict=True) if k]},
            "wire": {**sample["wire"], "claims": [c for c, k in zip(
                sample["wire"]["claims"], keep, strict=True) if k]}}


def surest(sample: dict[str, Any], stats: list[Fields], score: str,
           threshold: float) -> dict[str, Any]:
    """`sample` without its claims whose `score` (from `stats`, `kept_claim_stats`'s) is below
    `threshold`."""
    return _filtered(sample, [SCORES[score](f) >= threshold for f in stats])


def text_only(task: str, answer: dict[str, Any]) -> dict[str, Any]:
    """The wire v4 answer (text only) of a consolidate or reflect sample's verified wire answer:
    a v4 one as it is; an older one (the canonical shape, ids written by the model) without its
    ids, which the codec then reads from the text."""
    if task == "consolidate":
        return {"observations": [o["statement"] if isinstance(o, dict) else o
                                 for o in answer["observations"]]}
    return {"answer": answer["answer"]}


def compose_row(row: dict[str, Any], rules: dict[str, Any], model: dict[str, Any],
                policies: dict[str, str], name: str) -> dict[str, Any]:
    """The hybrid's sample for one row from the rules' and the model's samples of it."""
    task = row["task"]
    policy = policies[task]
    seconds = round(float(rules["seconds"]) + float(model["seconds"]), 4)
    if policy == "fallback":
        if task != "reflect":
            raise EvalError(f"policy 'fallback' is a reflect policy, not {task}'s")
        policy = "rules" if falls_back(row["input"], model.get("output")) else "model"
    if task != "extract" and policy != "derived":
        source = rules if policy == "rules" else model
        return {**source, "arm": name, "seconds": seconds}
    schema = build_schema(task, row["input"])
    if task == "extract":
        merged = merge_extract(rules.get("wire"), model.get("wire"), policy,
                               claim_limit(schema))
    elif model.get("wire") is None:  # the model's answer failed: nothing to read choices from
        return {**model, "arm": name, "seconds": float(model["seconds"])}
    else:
        merged = text_only(task, model["wire"])
        seconds = float(model["seconds"])  # the model alone: the rules do not run
    raw = wire.dump_answer(task, merged)
    sample: dict[str, Any] = {
        "arm": name, "id": row["id"], "episode": row["episode"], "task": task,
        "prompt_sha256": model["prompt_sha256"], "schema_sha256": model["schema_sha256"],
        "max_tokens": model["max_tokens"], "seconds": seconds}
    try:
        result = codec.decode(task, row["input"], raw, finish_reason="stop", schema=schema)
    except codec.CodecError as exc:
        sample.update(attempts=[{"raw": raw, "finish_reason": "stop", "error": str(exc)}],
                      status="failed", output=None, wire=None, diagnostics=[],
                      error={"type": type(exc).__name__, "kind": exc.kind, "message": str(exc)})
    else:
        sample.update(attempts=[{"raw": raw, "finish_reason": "stop", "error": None}],
                      status="first_try", output=result.output, wire=result.wire,
                      diagnostics=result.diagnostics, error=None)
    sample["verdicts"] = grade_sample(row, sample)
    return sample


def gate_keeps(gate: Any, fields: Any, prob: float) -> bool:
    """Whether the claim gate `gate` (`memworker.inference.gate.ClaimGate`) keeps a claim of
    these field statistics (None for a verifier gate) and verifier P(keep), as `ClaimGate.apply`
    decides (each part's score rounded as it records it)."""
    def part(g: Any) -> bool:
        score = prob if g.score == VERIFIER else SCORES[g.score](fields)
        return round(score, 4) >= g.threshold
    return part(gate) or (gate.either is not None and part(gate.either))


def gate_mask(gate: Any, row: dict[str, Any], sample: dict[str, Any],
              stats: list[Fields] | None, verifier: Any | None) -> list[bool]:
    """Per claim of an extract sample's output: whether the claim gate `gate` keeps it
    (`gate_keeps`), from the claims' field statistics `stats` (`kept_claim_stats`; None when the
    gate reads no log-probabilities) and, only when the gate reads it
    (`ClaimGate.needs_verifier`), the verifier's P(keep) (`verifier`; None when it does not)."""
    claims = sample["output"]["claims"]
    probs = [verifier.prob(c, row["input"]) for c in claims] if gate.needs_verifier \
        else [0.0] * len(claims)
    return [gate_keeps(gate, f, p) for f, p in
            zip(stats if stats is not None else [None] * len(claims), probs, strict=True)]
