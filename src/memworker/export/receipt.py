"""The release receipt (`<out>/release-receipt.json`) and its one writer: nothing else in
memworker writes the file (tests/test_receipt_writer.py).

Its parts, each recorded by one stage through a function here:
- the export's (`memworker.export.release`): lineage, corpus, prompts, worker, export settings;
  the export builds them and signs the folder (`sign`), which records `created_utc` and `tools`;
- each evaluation's, `evaluation.<set>` (the evaluator's `--into-receipt RECEIPT --release DIR`:
  `record_set`, which `eval/run.py` and the main job hand to `memworker.eval.cli.main`, since the
  evaluator is below the export and imports none of it), or the whole section
  (`record_evaluation`); an evaluation that ran the student otherwise than the release's worker
  says is refused (`check_worker`, which verification runs too);
- the gate's: its reasoned waivers (`record_waiver`).

Every change re-signs the folder (`sign`): the release gate recomputed from the evaluation and
the waivers, the artifacts hashed, the model card rendered, the receipt and `SHA256SUMS`
written, the receipt and card copied to `receipts_dir`, the top-level `Modelfile` and
`SHA256SUMS` republished. A re-signing keeps the export's `created_utc` and `tools` and records
itself in `resigned`. The refusals are one-line `ExportError`s, raised before anything is
written. `export/rebuild.py` puts the committed receipt and card back on a rebuilt folder
(`restore`).
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from memworker.export import card, gate
from memworker.export import modelfile as mfile
from memworker.hashing import (
    HashMismatch,
    read_sha256sums,
    sha256_file,
    verify_sha256sums,
    write_json,
    write_sha256sums,
)
from memworker.inference import hybrid
from memworker.inference.hmem import WorkerError, record_config
from memworker.receipts import RELEASE_RECEIPT, SUMS, environment

#: the release's model card as committed beside its receipt (`receipts/release-card.md`)
RELEASE_CARD = "release-card.md"


class ExportError(ValueError):
    """The export is refused; the message is one line saying what to do."""


def library_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _tools() -> dict[str, Any]:
    env = environment()
    libs = env["libraries"]
    for name in ("llama-cpp-python", "gguf", "jsonschema"):
        if (v := library_version(name)) is not None:
            libs[name] = v
    return {"libraries": libs, "git": env["git"], "hardware": env["hardware"]}


def _artifact(folder: Path, rel: str) -> dict[str, Any]:
    path = folder / rel
    return {"sha256": sha256_file(path), "bytes": path.stat().st_size}


def _write_sums(out: Path) -> None:
    write_sha256sums(out, [p for p in out.rglob("*")
                           if p.is_file() and p.relative_to(out).as_posix() != SUMS])


def existing_release(out: Path) -> dict[str, Any] | None:
    """The release receipt in `out`, or None when there is none."""
    path = out / RELEASE_RECEIPT
    return json.loads(path.read_text("utf-8")) if path.is_file() else None


def _required(out: Path) -> dict[str, Any]:
    release = existing_release(out)
    if release is None:
        raise ExportError(f"{out} holds no {RELEASE_RECEIPT}; export the release first")
    return release


def _check_sums(out: Path) -> None:
    """A release is re-signed only when it verifies as signed."""
    try:
        verify_sha256sums(out / SUMS)
    except (HashMismatch, FileNotFoundError) as exc:
        raise ExportError(f"{out} does not verify, refusing to re-sign it: {exc}") from None


# --- the parts' rules ----------------------------------------------------------------------------

def _ran(config: dict[str, Any]) -> dict[str, Any]:
    """The worker an evaluator's (or live acceptance's) `config` ran its arm `student` as, in
    the receipt's `worker` form."""
    sampler = config.get("sampler") or {}
    return {"extract_form": sampler.get("extract_form", "window"),
            "claim_gate": (config.get("claim_gates") or {}).get("student"),
            **({"propose": True} if "student" in config.get("proposing", []) else {}),
            **({"turn_history": sampler["turn_history"]}
               if sampler.get("turn_history", "answers") != "answers" else {}),
            **({"event_stamps": sampler["event_stamps"]}
               if sampler.get("event_stamps", "full") != "full" else {}),
            **({"turn_quotes": sampler["turn_quotes"]}
               if sampler.get("turn_quotes", "upto") != "upto" else {}),
            **({"claim_layout": sampler["claim_layout"]}
               if sampler.get("claim_layout", "v3") != "v3" else {}),
            **{key: policy for key, policy in hybrid.SETTINGS.items()
               if "student" in config.get(key, [])},
            **({"turn_gate": config["turn_gates"]["student"]}
               if "student" in (config.get("turn_gates") or {}) else {}),
            **({"turn_gate_tail": sampler["turn_gate_tail"]}
               if sampler.get("turn_gate_tail", "read") != "read"
               and "student" in (config.get("turn_gates") or {}) else {})}


def check_worker(folder: Path, receipt: dict[str, Any]) -> list[str]:
    """The release's `worker` (how its student must be run: extraction form, claim gate,
    proposing; a receipt without one: the window form, no gate, no proposing) is valid, named in
    the Modelfile when not the default, and is how every recorded evaluation ran the student (its
    arm `student`): otherwise the published figures are not those of the worker the release
    ships."""
    if not receipt.get("student"):
        return []
    where = folder / RELEASE_RECEIPT
    worker = {**mfile.DEFAULT_WORKER, **(receipt.get("worker") or {})}
    try:
        if record_config(worker) != worker:
            return [f"{where}: worker {worker} is not in its normal form"]
    except WorkerError as exc:
        return [f"{where}: worker: {exc}"]
    problems = []
    line = mfile.worker_line(worker)
    path = folder / "Modelfile"
    if line and path.is_file() and line not in path.read_text("utf-8").splitlines():
        problems.append(f"{path}: does not name the release's worker ({line[2:]})")
    runs = sorted((receipt.get("evaluation") or {}).items())
    if isinstance(receipt.get("live"), dict):
        runs.append(("live acceptance", receipt["live"]))
    for name, summary in runs:
        config = (summary or {}).get("config") or {}
        if "student" not in (config.get("arms") or {}):
            continue
        ran = _ran(config)
        if ran != worker:
            problems.append(f"{where}: evaluation {name} ran the student with "
                            f"{mfile.worker_words(ran)}, but the release ships "
                            f"{mfile.worker_words(worker)}: its figures are not the shipped "
                            "worker's")
    return problems


# --- signing -------------------------------------------------------------------------------------

def sign(out: Path, receipt: dict[str, Any], receipts_dir: Path | None,
         publish_dir: Path | None, resigned: str | None = None) -> dict[str, Any]:
    """Hash the artifacts, write card, receipt, SHA256SUMS; copy the receipt; publish.

    An export records when and with what it ran (`created_utc`, `tools`: libraries, git state,
    hardware). A later re-signing (`resigned`: what was added, e.g. an evaluation) keeps those,
    since the artifacts are still the export's, and records itself in `resigned`."""
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if resigned is None or "tools" not in receipt or "created_utc" not in receipt:
        receipt["created_utc"] = now
        receipt["tools"] = _tools()
        receipt.pop("resigned", None)
    else:
        receipt["resigned"] = {"utc": now, "after": resigned, "git": _tools()["git"]}
    receipt["gate"] = gate.evaluate(receipt)
    rels = [r for r in (p.relative_to(out).as_posix() for p in sorted(out.rglob("*"))
                        if p.is_file()) if r not in (SUMS, RELEASE_RECEIPT, card.CARD)]
    receipt["artifacts"] = {rel: _artifact(out, rel) for rel in rels}
    (out / card.CARD).write_text(card.render(receipt), "utf-8")
    receipt["artifacts"][card.CARD] = _artifact(out, card.CARD)
    write_json(out / RELEASE_RECEIPT, receipt)
    _write_sums(out)
    if receipts_dir is not None:
        receipts_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / RELEASE_RECEIPT, receipts_dir / RELEASE_RECEIPT)
        # the card as released: a rebuild puts it back rather than rendering it with a later
        # card.py (`restore`)
        shutil.copyfile(out / card.CARD, receipts_dir / RELEASE_CARD)
    if publish_dir is not None:
        publish(out, publish_dir, receipt)
    return receipt


def publish(out: Path, publish_dir: Path, receipt: dict[str, Any] | None = None) -> None:
    """Top-level `Modelfile` and `SHA256SUMS` in `publish_dir` for the release in `out`."""
    receipt = receipt or existing_release(out)
    prefix = Path(os.path.relpath(out.resolve(), publish_dir.resolve())).as_posix()
    if (out / "Modelfile").is_file() and receipt.get("student"):
        text = (out / "Modelfile").read_text("utf-8")
        gguf = receipt["student"]["gguf"]
        text = text.replace(f"FROM ./{gguf}\n", f"FROM ./{prefix}/{gguf}\n", 1)
        (publish_dir / "Modelfile").write_text(text, "utf-8")
    sums = read_sha256sums(out / SUMS)
    lines = [f"{digest}  {prefix}/{rel}\n" for rel, digest in sorted(sums.items())]
    lines.append(f"{sha256_file(out / SUMS)}  {prefix}/{SUMS}\n")
    (publish_dir / SUMS).write_text("".join(lines), "utf-8")


def default_publish_dir(out: Path) -> Path | None:
    """The current folder when it is a project checkout (holds pyproject.toml) and `out` is a
    folder directly in it (the repo's `release/`), else None: a release written deeper (the main
    job's `runs/release/`) never rewrites the checkout's top-level Modelfile and SHA256SUMS."""
    cwd = Path.cwd().resolve()
    inside = out.resolve().parent == cwd
    return cwd if inside and (cwd / "pyproject.toml").is_file() else None


# --- the evaluations' and the gate's parts -------------------------------------------------------

def record_evaluation(out: str | Path, evaluation: dict[str, Any], *,
                      receipts_dir: str | Path | None = "receipts",
                      publish_dir: str | Path | None = None) -> dict[str, Any]:
    """Fill the release receipt's `evaluation` section, then rewrite the card, the receipt copy
    and SHA256SUMS so the release verifies again. An evaluation that did not run the student as
    the release's `worker` says is refused."""
    out = Path(out)
    return _record_section(out, _required(out), "evaluation", evaluation, "the evaluation",
                           receipts_dir, publish_dir)


def _record_section(out: Path, release: dict[str, Any], key: str, value: Any, what: str,
                    receipts_dir: str | Path | None, publish_dir: str | Path | None
                    ) -> dict[str, Any]:
    """Set `release[key] = value` when every run it holds ran the release's worker, and
    re-sign the folder (`resigned`: `key`)."""
    _check_sums(out)
    problems = check_worker(out, {**release, key: value})
    if problems:
        raise ExportError(f"refusing to record {what}: {problems[0]}")
    release[key] = value
    return sign(out, release, Path(receipts_dir) if receipts_dir else None,
                Path(publish_dir) if publish_dir else None, resigned=key)


def _copy_of(path: str | Path, release_dir: str | Path) -> tuple[Path, dict[str, Any]]:
    """The release folder a receipt given to --into-receipt belongs to (its own file or a
    byte-identical copy), and where the copy is refreshed (None: the folder's own file)."""
    p, release = Path(path), Path(release_dir)
    copy = release / p.name
    if not copy.is_file() or copy.read_bytes() != p.read_bytes():
        raise ExportError(f"{p} is a release receipt but {copy} is not the same file: pass "
                          "the release folder it belongs to with --release DIR")
    return release, {"receipts_dir": None if p.resolve().parent == release.resolve()
                     else p.parent, "publish_dir": default_publish_dir(release)}


def record_set(path: str | Path, set_name: str, summary: dict[str, Any],
               release_dir: str | Path) -> dict[str, Any]:
    """The evaluator's `--into-receipt RECEIPT --release DIR` on a release receipt: `summary`
    becomes `evaluation[set_name]` of the release in `release_dir`, whose receipt `path` must be
    (the same bytes: the release's own file or its copy, e.g. receipts/release-receipt.json).
    The copy is refreshed with the folder, and the checkout's top-level files are republished
    when the folder lies directly in the current one (`default_publish_dir`)."""
    release, where = _copy_of(path, release_dir)
    section = (existing_release(release) or {}).get("evaluation")
    section = dict(section) if isinstance(section, dict) else {}
    section[set_name] = summary
    return record_evaluation(release, section, **where)


def record_live(out: str | Path, summary: dict[str, Any], *,
                receipts_dir: str | Path | None = "receipts",
                publish_dir: str | Path | None = None) -> dict[str, Any]:
    """Put a live-acceptance summary (`eval/live.py`'s `summary.json`) in the release receipt's
    `live`, which the gate of a format-2 receipt reads (`gate.live_check`), then re-sign the
    folder like `record_evaluation`. Refused when it lacks the student's or the rules' result,
    when its student is not this release's student GGUF (by sha256), or when it ran the student
    otherwise than the release's `worker` says."""
    out = Path(out)
    release = _required(out)
    if not release.get("student"):
        raise ExportError(f"{out} is a base-only release: live acceptance grades a student")
    arms = gate.live_passed(summary)
    lacking = [a for a in ("student", "rules") if a not in arms]
    if lacking:
        raise ExportError("refusing to record live acceptance: it has no result of the "
                          + " and the ".join(lacking) + " arm (run eval/live.py with "
                          "--arm student=… --arm rules)")
    gguf = release["student"].get("gguf")
    want = ((release.get("artifacts") or {}).get(gguf) or {}).get("sha256")
    got = ((summary.get("worker") or {}).get("student") or {}).get("gguf_sha256")
    if not want or got != want:
        raise ExportError(f"refusing to record live acceptance: its student GGUF has sha256 "
                          f"{got}, but this release's {gguf} has {want}")
    return _record_section(out, release, "live", summary, "live acceptance", receipts_dir,
                           publish_dir)


def record_live_file(path: str | Path, summary: dict[str, Any],
                     release_dir: str | Path) -> dict[str, Any]:
    """`eval/live.py --into-receipt RECEIPT --release DIR`: as `record_set`, for the receipt's
    `live` (RECEIPT must be DIR's receipt or its copy, e.g. receipts/release-receipt.json)."""
    release, where = _copy_of(path, release_dir)
    return record_live(release, summary, **where)


def record_waiver(out: str | Path, set_name: str, metric: str, reason: str, *,
                  receipts_dir: str | Path | None = "receipts",
                  publish_dir: str | Path | None = None) -> dict[str, Any]:
    """Record a reasoned release-gate waiver `{metric, set, reason}` in the release receipt's
    `gate.waivers` (an empty reason, an ungated metric or a set not evaluated is refused), then
    re-sign the folder like `record_evaluation`."""
    out = Path(out)
    release = _required(out)
    try:
        release["gate"] = gate.add_waiver(release, set_name, metric, reason)
    except gate.WaiverError as exc:
        raise ExportError(str(exc)) from None
    _check_sums(out)
    return sign(out, release, Path(receipts_dir) if receipts_dir else None,
                Path(publish_dir) if publish_dir else None, resigned="waiver")


# --- the rebuild ---------------------------------------------------------------------------------

def restore(out: Path, receipts_dir: Path) -> None:
    """Put the committed release receipt and card (`receipts_dir/release-card.md`) on the
    rebuilt release folder `out`, with the SHA256SUMS they imply (`export/rebuild.py`)."""
    shutil.copyfile(receipts_dir / RELEASE_RECEIPT, out / RELEASE_RECEIPT)
    if (receipts_dir / RELEASE_CARD).is_file():  # the card as released
        shutil.copyfile(receipts_dir / RELEASE_CARD, out / card.CARD)
    else:  # a release from before the card was committed: rendered with today's card.py
        (out / card.CARD).write_text(card.render(existing_release(out)), "utf-8")
    _write_sums(out)
