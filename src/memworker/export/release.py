"""Build a release folder from a finished stage run (and/or the base alone).

    <out>/memworker-<base>-<stage>-q8_0.gguf   the student: adapter merged, Q8_0
    <out>/base-q8_0.gguf                       the base through the same path (`export_base`)
    <out>/adapter/                             the stage's PEFT adapter, as trained
    <out>/Modelfile                            Ollama recipe (FROM ./<student gguf>)
    <out>/README.md                            model card, every number read from the receipt
    <out>/release-receipt.json                 lineage, corpus, prompts, settings, artifacts
    <out>/SHA256SUMS                           every file above (`sha256sum -c` accepts it)

The export builds its part of the receipt and signs the folder through the receipt's one writer,
`memworker.export.receipt` (`sign`: card, receipt, SHA256SUMS), which copies the receipt to
`<receipts_dir>/release-receipt.json`; `publish_dir` (the repository root for the main job) gets
the committed top-level `Modelfile` (FROM the GGUF where the release folder sits below it) and
`SHA256SUMS` (paths relative to it).

Refusals (ExportError, one line, nothing written): the run has no receipt; its adapter files
differ from the receipt; the base being merged is not the one the adapter was trained on; a
prompt template changed since training; the lineage is broken; `out` holds another release
(another base, or another student run) unless `force`. Adding the base GGUF to a student release
of the same base (or the student to a base-only release) is not a conflict.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from memworker import registry
from memworker.export import converter
from memworker.export import modelfile as mfile
from memworker.export.merge import merged_folder
from memworker.export.receipt import ExportError, existing_release, library_version, sign
from memworker.export.vocab import restore_base_vocab
from memworker.hashing import read_sha256sums, sha256_bytes, sha256_file
from memworker.inference.hmem import WorkerError, worker_config
from memworker.prompts import template_hashes
from memworker.receipts import (
    ADAPTER_DIR,
    RECEIPT,
    RELEASE_KIND,
    RELEASE_RECEIPT,
    SUMS,
    adapter_differences,
    adapter_files,
    rebuild_command,
)

BASE_GGUF = "base-q8_0.gguf"
OUTTYPE = "q8_0"
FORMAT = 2  # 2: the gate holds the natural set above the rules and gates live acceptance (gate.LIVE_FORMAT)

LABEL_METHOD = ("procedural: every gold answer is derived from the generated world state "
                "(people, attributes, events, timestamps), independent of any LLM")
LABEL_LIMITS = [
    "the episodes are synthetic: templated English phrasings of a generated world, not real "
    "conversations; scores on the held-out set measure generalisation within that distribution",
    "labels are correct by construction only for what the generator models (its fact types, "
    "phrasings and time expressions); anything outside it is unlabelled",
    "an optional LLM teacher may paraphrase events; its rows pass the same audit but the "
    "paraphrase itself is not checked against the world state",
]
KNOWN_LIMITATIONS = [
    "a small student trained for a short CPU chain: read the evaluation section, not the name",
    "the GGUF is Q8_0 of a merge into the unquantised base; Q8_0 rounding changes logits "
    "slightly against the merged HF weights",
    "the Modelfile's template renders the training ChatML exactly (tested against the "
    "tokenizer's chat template with a reference renderer); no Ollama server ran here",
    "schema-constrained decoding (the codec) is the supported way to call the model; free "
    "generation is not validated",
]


# --- small helpers -------------------------------------------------------------------------------

def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-." else "-" for c in text).strip("-")


def student_gguf_name(base_key: str, stage: str) -> str:
    return f"memworker-{_slug(base_key)}-{_slug(stage)}-{OUTTYPE}.gguf"


def _load_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text("utf-8"))


# --- the run and its checks ----------------------------------------------------------------------

def load_run(run_dir: Path) -> tuple[dict[str, Any], str]:
    path = run_dir / RECEIPT
    if not path.is_file():
        raise ExportError(f"{run_dir} has no {RECEIPT} (the stage did not finish); train it with "
                          f"`python train/run.py --stage {run_dir.name}` first")
    receipt = _load_json(path)
    if "stage" not in receipt or "adapter" not in receipt or "base" not in receipt:
        raise ExportError(f"{path} is not a stage receipt (no stage/adapter/base entry)")
    return receipt, sha256_file(path)


def base_for(receipt: dict[str, Any], base: str | None) -> registry.PreparedBase:
    """The base to merge into: `base` (a registry key or local folder) or the receipt's own."""
    theirs = receipt["base"]
    if base is None:
        base = theirs["key"] if theirs.get("source") != "local" else theirs.get("path") or \
            theirs.get("hf_repo")
    prepared = registry.prepare(str(base))
    if (prepared.model.key, prepared.sha256) != (theirs.get("key"), theirs.get("weights_sha256")):
        raise ExportError(
            f"the adapter was trained on base {theirs.get('key')} (weights sha256 "
            f"{str(theirs.get('weights_sha256'))[:12]}…), not on {prepared.model.key} "
            f"({prepared.sha256[:12]}…): export with that base (--base), or retrain")
    return prepared


def check_adapter(run_dir: Path, receipt: dict[str, Any]) -> None:
    recorded = receipt["adapter"].get("files") or {}
    folder = run_dir / ADAPTER_DIR
    actual = adapter_files(run_dir) if folder.is_dir() else {}
    if not recorded or recorded != actual:
        lines = adapter_differences(recorded, actual, run_dir) or [f"{folder}: no files"]
        raise ExportError(f"the adapter in {folder} differs from {run_dir / RECEIPT}: "
                          + "; ".join(lines) + " — restore the committed files (`git checkout -- "
                          f"{folder}`; an adapter .gitignore hides is committed with `git add -f`)"
                          f" or rebuild it: `{rebuild_command(receipt)}`")


def check_prompts(receipt: dict[str, Any]) -> None:
    now, then = template_hashes(), receipt.get("prompts_sha256") or {}
    changed = [name for name in now if then.get(name) != now[name]]
    if changed:
        raise ExportError(f"prompt templates {', '.join(changed)} changed since stage "
                          f"{receipt['stage']} was trained (the Modelfile and codec would not "
                          "match training); restore them or retrain")


def _find_receipt(stage_entry: dict[str, Any], near: Path,
                  receipts_dir: Path | None) -> Path | None:
    """The parent's receipt with the recorded sha256: in its run folder (as recorded, or next to
    the child run), else the committed copy in `receipts_dir`."""
    want = stage_entry["receipt_sha256"]
    recorded = Path(stage_entry.get("run_dir") or stage_entry["stage"])
    candidates = [recorded / RECEIPT, near.parent / recorded.name / RECEIPT]
    if receipts_dir is not None:
        candidates.append(receipts_dir / f"{stage_entry['stage']}-receipt.json")
    for path in candidates:
        if path.is_file() and sha256_file(path) == want:
            return path
    return None


def _stage_summary(receipt: dict[str, Any], sha: str) -> dict[str, Any]:
    """One lineage entry: what the card and reviewers read, all copied from the stage receipt."""
    res, data = receipt.get("result") or {}, receipt.get("data") or {}
    keep = ("global_step", "epoch", "final_train_loss", "mean_train_loss", "val_loss",
            "runtime_s", "s_per_step", "tokens_per_s")
    return {
        "stage": receipt["stage"], "receipt_sha256": sha,
        "adapter_sha256": receipt["adapter"].get("sha256"),
        "config_sha256": receipt.get("config_sha256"),
        "parent_receipt_sha256": (receipt.get("parent") or {}).get("receipt_sha256"),
        "git_commit": ((receipt.get("environment") or {}).get("git") or {}).get("commit"),
        "result": {k: res[k] for k in keep if k in res},
        "data": {k: data[k] for k in ("corpus", "manifest_sha256", "split_sha256", "replay")
                 if k in data},
        "rows": {s: (data.get(s) or {}).get("rows") for s in ("train", "val")},
    }


def walk_lineage(run_dir: Path, receipt: dict[str, Any], sha: str,
                 receipts_dir: Path | None) -> list[dict[str, Any]]:
    """Every stage receipt from the root stage to this run, in training order."""
    chain = [_stage_summary(receipt, sha)]
    current, near = receipt, run_dir
    while current.get("parent"):
        parent = current["parent"]
        path = _find_receipt(parent, near, receipts_dir)
        if path is None:
            raise ExportError(
                f"lineage broken: the receipt of parent stage {parent['stage']} (sha256 "
                f"{parent['receipt_sha256'][:12]}…) is neither in {parent.get('run_dir')} nor in "
                f"{receipts_dir or 'a receipts folder'}; rerun the chain or restore the receipt")
        current, near = _load_json(path), path.parent
        chain.append(_stage_summary(current, parent["receipt_sha256"]))
        if len(chain) > 32:
            raise ExportError("lineage broken: more than 32 parent stages (a cycle?)")
    return chain[::-1]


def corpus_provenance(receipt: dict[str, Any]) -> dict[str, Any]:
    """Manifest and split hashes from the receipt; the held-out hash, label method and generator
    from the manifest itself when it is present and matches the receipt's sha256."""
    data = receipt.get("data") or {}
    out: dict[str, Any] = {"corpus": data.get("corpus"),
                           "manifest_sha256": data.get("manifest_sha256"),
                           "split_sha256": data.get("split_sha256"),
                           "replay": data.get("replay"),
                           "label_method": LABEL_METHOD, "label_limits": LABEL_LIMITS}
    manifest = Path(str(data.get("corpus"))) / "manifest.json"
    if manifest.is_file() and sha256_file(manifest) == data.get("manifest_sha256"):
        doc = _load_json(manifest)
        out["heldout"] = {"file": "heldout.jsonl",
                          "sha256": (doc.get("files") or {}).get("heldout.jsonl"),
                          "rows": (doc.get("heldout") or {}).get("rows"),
                          "rule": (doc.get("heldout") or {}).get("rule")}
        out["generator"] = {k: doc.get(k) for k in ("generator", "generator_version", "seed")}
        out["teacher"] = (doc.get("args") or {}).get("teacher")
        if out["teacher"] and out["teacher"] != "none":
            out["label_method"] += (f"; events paraphrased by an LLM teacher "
                                    f"({(doc.get('args') or {}).get('teacher_model')})")
        out["files_sha256"] = doc.get("files")
    else:
        out["heldout"] = None
        out["note"] = (f"{manifest} is missing or differs from the receipt's manifest sha256: "
                       "held-out hash and generator not recorded")
    return out


# --- the output folder ---------------------------------------------------------------------------

def check_out(out: Path, base_sha: str, student_sha: str | None, force: bool) -> None:
    """Refuse an output folder that holds another release (or unrelated files) unless `force`."""
    if not out.exists() or force:
        return
    if not out.is_dir():
        raise ExportError(f"{out} exists and is not a folder")
    old = existing_release(out)
    if old is None:
        if any(out.iterdir()):
            raise ExportError(f"{out} is not empty and holds no {RELEASE_RECEIPT}; pick an empty "
                              "folder or pass --force to write into it")
        return
    old_base = (old.get("base") or {}).get("weights_sha256")
    old_student = (old.get("student") or {}).get("receipt_sha256")
    if old_base != base_sha or (student_sha and old_student and old_student != student_sha):
        what = (f"base {(old.get('base') or {}).get('key')}" if old_base != base_sha
                else f"stage {(old.get('student') or {}).get('stage')} run "
                     f"{old_student[:12]}…")
        raise ExportError(f"{out} holds another release ({old.get('name')}: {what}); pass "
                          "--force to replace it, or pick another --out")


def clear_release(out: Path) -> None:
    """Remove the files of the release in `out` (those its SHA256SUMS lists, and the sums)."""
    sums = out / SUMS
    listed = list(read_sha256sums(sums)) if sums.is_file() else []
    for rel in [*listed, RELEASE_RECEIPT, SUMS]:
        (out / rel).unlink(missing_ok=True)
    shutil.rmtree(out / ADAPTER_DIR, ignore_errors=True)


def _convert_model(prepared: registry.PreparedBase, adapter: Path | None, gguf_name: str,
                   out: Path, gguf_metadata: dict[str, Any], pre_tokenizer: str | None,
                   work_root: Path | None) -> dict[str, Any]:
    """Merge (or only load/save) into a temp HF folder, convert, move the GGUF into `out`."""
    with tempfile.TemporaryDirectory(prefix="memworker-export-", dir=work_root) as tmp:
        tmp = Path(tmp)
        started = time.perf_counter()
        merge = merged_folder(prepared, adapter, tmp / "hf")
        merge["seconds"] = round(time.perf_counter() - started, 2)
        partial = tmp / gguf_name
        conversion = converter.convert(tmp / "hf", partial, outtype=OUTTYPE,
                                       gguf_metadata=gguf_metadata,
                                       model_name=gguf_metadata.get("general.name"),
                                       pre_tokenizer=pre_tokenizer, log=tmp / "convert.log")
        if prepared.model.source == "embedded-gguf":
            # a SentencePiece base keeps its own vocabulary (memworker.export.vocab); a base
            # whose GGUF vocabulary is the converter's own (SmolLM2) is left byte for byte
            restored = restore_base_vocab(registry.embedded_gguf_path(prepared.model.key),
                                          partial)
            if restored is not None:
                conversion["vocab"] = restored
        out.mkdir(parents=True, exist_ok=True)
        shutil.move(str(partial), out / gguf_name)
    return {"gguf": gguf_name, "merge": merge, "conversion": conversion}


def _gguf_metadata(name: str, prepared: registry.PreparedBase, description: str) -> dict:
    base = prepared.model
    repo_url = (f"https://huggingface.co/{base.hf_repo}" if base.source != "local" else None)
    entry = {"name": base.hf_repo.rsplit("/", 1)[-1], "organization": base.hf_repo.split("/")[0]
             if "/" in base.hf_repo else None, "repo_url": repo_url}
    return {"general.name": name, "general.version": library_version("memworker") or "0",
            "general.description": description,
            "general.base_models": [{k: v for k, v in entry.items() if v}],
            "general.tags": ["memworker", "memory-worker", "extraction", "gguf"]}


def _license_text(prepared: registry.PreparedBase) -> str:
    base = prepared.model
    return (f"SPDX-License-Identifier: {base.license}. memworker student of {base.hf_repo} "
            f"(licence {base.license}); full Apache-2.0 text: "
            "https://www.apache.org/licenses/LICENSE-2.0" if base.license == "apache-2.0"
            else f"Licence of the base {base.hf_repo}: {base.license}")


def _new_receipt(prepared: registry.PreparedBase) -> dict[str, Any]:
    identity = {k: v for k, v in prepared.identity.items() if k != "path"}
    return {"kind": RELEASE_KIND, "format": FORMAT,
            "name": f"memworker-{_slug(prepared.model.key)}-base-only",
            "version": library_version("memworker"), "license": prepared.model.license,
            "base": identity, "student": None, "base_export": None, "lineage": [],
            "corpus": None, "prompts_sha256": template_hashes(),
            "export": {"outtype": OUTTYPE, "num_ctx": mfile.NUM_CTX},
            "artifacts": {}, "evaluation": None, "gate": None,
            "known_limitations": KNOWN_LIMITATIONS}


def _start(out: Path, prepared: registry.PreparedBase, student_sha: str | None,
           force: bool) -> dict[str, Any]:
    check_out(out, prepared.sha256, student_sha, force)
    converter.ensure_converter()  # fails (one line) before anything is written
    old = existing_release(out) if out.is_dir() else None
    if force and out.is_dir():
        same_base = old is not None and \
            (old.get("base") or {}).get("weights_sha256") == prepared.sha256
        old_student = (old or {}).get("student") or {}
        if same_base and (student_sha is None
                          or old_student.get("receipt_sha256") in (None, student_sha)):
            return old  # not another release: keep it and overwrite what is re-exported
        clear_release(out)
        old = None
    return old or _new_receipt(prepared)


# --- the public API ------------------------------------------------------------------------------

def export_release(run_dir: str | Path, out: str | Path, *, force: bool = False,
                   base: str | None = None, receipts_dir: str | Path | None = "receipts",
                   publish_dir: str | Path | None = None, pre_tokenizer: str | None = None,
                   work_dir: str | Path | None = None, extract_form: str = "window",
                   claim_gate: str | None = None, propose: bool = False,
                   turn_history: str = "answers", event_stamps: str = "full",
                   turn_quotes: str = "upto", claim_layout: str = "v3",
                   with_rules: str = "none", reflect_rules: str = "none",
                   consolidate_rules: str = "none", turn_gate: float | None = None,
                   turn_gate_tail: str = "read") -> dict[str, Any]:
    """Export the student of the finished stage run `run_dir` into the release folder `out`;
    returns the release receipt. All refusals happen before anything is written.

    `extract_form`, `claim_gate`, `propose` and `turn_history` say how the student must be run
    (the form it was trained to extract in, `memworker.turns.FORMS`; its claim confidence gate,
    `ClaimGate.parse`, chosen on val; whether every turn proposes a claim for that gate; whether
    each turn reads the window alone, `memworker.turns` "Read once"; how its extract prompts
    write the events' timestamps, `memworker.prompts.restamp`; which events a turn may quote;
    how it writes a claim, `memworker.wire.LAYOUTS`; whether the rules' extract claims are kept
    beside its own, `memworker.inference.hybrid`; whether a reflection it abstains from falls back
    to the rules' answer, `hybrid.reflect_fallback`; whether the rules consolidate for it,
    `hybrid.rules_result`; which turns the turn gate leaves unasked, `memworker.inference.turn_gate`,
    and whether the prompts end at the last asked turn's event, `codec.run_turns(tail=)`):
    the receipt's `worker`
    records them, the Modelfile names them, `MemWorkerBackend.from_release` applies them, and
    `export/verify.py` checks that every evaluation of the student ran it so."""
    run_dir, out = Path(run_dir), Path(out)
    try:
        worker = worker_config(extract_form, claim_gate, propose, turn_history, event_stamps,
                               turn_quotes, claim_layout, with_rules, reflect_rules,
                               consolidate_rules, turn_gate, turn_gate_tail)
    except WorkerError as exc:
        raise ExportError(str(exc)) from None
    receipts = Path(receipts_dir) if receipts_dir else None
    receipt, sha = load_run(run_dir)
    check_adapter(run_dir, receipt)
    prepared = base_for(receipt, base)
    check_prompts(receipt)
    lineage = walk_lineage(run_dir, receipt, sha, receipts)
    release = _start(out, prepared, sha, force)
    stage = receipt["stage"]
    name = f"memworker-{_slug(prepared.model.key)}-{_slug(stage)}"
    gguf_name = student_gguf_name(prepared.model.key, stage)
    meta = _gguf_metadata(name, prepared, f"memworker student: stage {stage} LoRA merged into "
                          f"{prepared.model.hf_repo}; run receipt sha256 {sha}")
    started = time.perf_counter()
    made = _convert_model(prepared, run_dir / ADAPTER_DIR, gguf_name, out, meta,
                          pre_tokenizer, Path(work_dir) if work_dir else None)
    shutil.rmtree(out / ADAPTER_DIR, ignore_errors=True)
    shutil.copytree(run_dir / ADAPTER_DIR, out / ADAPTER_DIR)
    mfile.write(out / "Modelfile", f"./{gguf_name}", end_of_turn=prepared.model.end_of_turn,
                license_text=_license_text(prepared), worker=worker)
    made["seconds"] = round(time.perf_counter() - started, 2)
    release.update(name=name, lineage=lineage, corpus=corpus_provenance(receipt),
                   prompts_sha256=template_hashes())
    release["student"] = {"stage": stage, "run_dir": str(run_dir), "receipt_sha256": sha,
                          "adapter_sha256": receipt["adapter"].get("sha256"), **made}
    release["worker"] = worker
    release["export"] = {"outtype": OUTTYPE, "num_ctx": mfile.NUM_CTX,
                         "modelfile": {"template_sha256": _sha_text(mfile.TEMPLATE),
                                       "temperature": 0, "seed": 0, "repeat_penalty": 1},
                         "merge_dtype": made["merge"]["dtype"],
                         "converter": made["conversion"]}
    return sign(out, release, receipts, Path(publish_dir) if publish_dir else None)


def export_base(out: str | Path, *, base_key: str = registry.DEFAULT_BASE, force: bool = False,
                receipts_dir: str | Path | None = "receipts", publish_dir: str | Path | None = None,
                pre_tokenizer: str | None = None, work_dir: str | Path | None = None) -> Path:
    """The base alone through the identical path into `out/base-q8_0.gguf`; the GGUF joins the
    release in `out` when that release has the same base. Returns the GGUF's path."""
    out = Path(out)
    prepared = registry.prepare(base_key)
    release = _start(out, prepared, None, force)
    meta = _gguf_metadata(f"{_slug(prepared.model.key)}-base", prepared,
                          f"base {prepared.model.hf_repo} through the memworker export path "
                          f"(weights sha256 {prepared.sha256})")
    started = time.perf_counter()
    made = _convert_model(prepared, None, BASE_GGUF, out, meta, pre_tokenizer,
                          Path(work_dir) if work_dir else None)
    made["seconds"] = round(time.perf_counter() - started, 2)
    release["base_export"] = made
    sign(out, release, Path(receipts_dir) if receipts_dir else None,
         Path(publish_dir) if publish_dir else None)
    return out / BASE_GGUF


def _sha_text(text: str) -> str:
    return sha256_bytes(text.encode("utf-8"))
