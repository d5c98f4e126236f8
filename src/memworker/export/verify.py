"""Verify a release folder: every check returns problems (strings naming the file), in order.

1. `SHA256SUMS` lists every file of the folder and each file hashes to it.
2. `release-receipt.json` records each artifact's sha256 and size as the files are.
3. The stage receipts in `receipts_dir` (the committed ones) hash to the receipt's lineage, the
   release's adapter files to the final stage receipt, and the committed
   `receipts_dir/release-receipt.json` (when present) is this release's receipt.
4. The Modelfile's FROM, TEMPLATE and SYSTEM are the ones the export writes.
5. Each GGUF loads in llama-cpp-python and answers one schema-constrained extraction request
   through the codec (`memworker.inference.codec.run` with `LlamaCppBackend`; a CodecError after
   the retry fails). This runs in a child process, so a native llama.cpp crash is reported as a
   problem naming the file instead of killing the verifier.

6. The release gate (`memworker.export.gate`, recomputed from the receipt's evaluation): the
   student is not worse than the base on any task's main metric beyond its interval, above the
   rules arm at extraction support and coverage (paired interval above 0; on the natural set not
   below), and not worse than the rules at consolidation and reflection beyond the interval,
   unless the receipt records a reasoned waiver; a release whose receipt holds no evaluation fails
   (one line naming the evaluator command) unless `allow_unevaluated`. The gate needs no model,
   so it runs with `load=False` too (after the file checks, before loading the GGUFs).

7. With `replay` N (`--replay N`): the store's worker, as a user runs it from the folder, writes
   on the first N extract windows of a committed evaluation exactly what that evaluation recorded
   for the student (`check_replay`).

`EXTRA_CHECKS`: further callables `(folder, release_receipt) -> list[str]` run after the checks
above; none is registered here.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memworker.corpus.sets import load_eval_rows
from memworker.export import gate
from memworker.export import modelfile as mfile
from memworker.export.receipt import check_worker
from memworker.hashing import HashMismatch, sha256_file, verify_sha256sums
from memworker.inference import codec
from memworker.inference.backends import BackendError, LlamaCppBackend
from memworker.inference.hmem import MemWorkerBackend
from memworker.inference.samples import EXTRACT
from memworker.prompts import system_prompt
from memworker.receipts import RELEASE_RECEIPT, SUMS
from memworker.samples import EvalError, read_samples

EXTRA_CHECKS: list[Callable[[Path, dict[str, Any]], list[str]]] = []


def check_sums(folder: Path) -> list[str]:
    sums = folder / SUMS
    if not sums.is_file():
        return [f"{sums}: missing (not a release folder, or not finished)"]
    try:
        listed = verify_sha256sums(sums)
    except HashMismatch as exc:
        return [f"{folder / rel}: " + ("missing" if act is None else
                                       f"sha256 {act[:12]}… differs from {SUMS} ({exp[:12]}…)")
                for rel, exp, act in exc.problems]
    except ValueError as exc:
        return [f"{sums}: {exc}"]
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    return [f"{folder / rel}: not listed in {SUMS}" for rel in sorted(present - set(listed) - {SUMS})]


def check_receipt(folder: Path, receipt: dict[str, Any], receipts_dir: Path | None) -> list[str]:
    problems = []
    for rel, art in sorted((receipt.get("artifacts") or {}).items()):
        path = folder / rel
        if not path.is_file():
            problems.append(f"{path}: missing (listed in {RELEASE_RECEIPT})")
        elif sha256_file(path) != art.get("sha256") or path.stat().st_size != art.get("bytes"):
            problems.append(f"{path}: differs from its sha256/size in {RELEASE_RECEIPT}")
    student = receipt.get("student")
    if student and student.get("gguf") not in (receipt.get("artifacts") or {}):
        problems.append(f"{folder / RELEASE_RECEIPT}: the student GGUF is not among its artifacts")
    if receipts_dir is None:
        return problems
    if receipt.get("lineage") and not receipts_dir.is_dir():
        return problems + [f"{receipts_dir}: no such folder (the committed stage receipts); pass "
                           "--receipts-dir '' to check a release without the repository"]
    for stage in receipt.get("lineage") or []:
        path = receipts_dir / f"{stage['stage']}-receipt.json"
        if not path.is_file():
            problems.append(f"{path}: missing (stage {stage['stage']} of the lineage)")
        elif sha256_file(path) != stage["receipt_sha256"]:
            problems.append(f"{path}: sha256 differs from the lineage in {RELEASE_RECEIPT}")
    if student and receipt.get("lineage"):
        final = receipts_dir / f"{student['stage']}-receipt.json"
        if final.is_file() and sha256_file(final) == student["receipt_sha256"]:
            files = json.loads(final.read_text("utf-8"))["adapter"].get("files") or {}
            for name, digest in sorted(files.items()):
                path = folder / "adapter" / name
                if not path.is_file() or sha256_file(path) != digest:
                    problems.append(f"{path}: differs from the adapter recorded in {final}")
    committed = receipts_dir / RELEASE_RECEIPT
    if committed.is_file() and committed.read_bytes() != (folder / RELEASE_RECEIPT).read_bytes():
        problems.append(f"{committed}: differs from {folder / RELEASE_RECEIPT} (another release)")
    return problems


def check_modelfile(folder: Path, receipt: dict[str, Any]) -> list[str]:
    student = receipt.get("student")
    path = folder / "Modelfile"
    if not student:
        return []
    if not path.is_file():
        return [f"{path}: missing"]
    parsed = mfile.parse(path.read_text("utf-8"))
    problems = []
    if parsed.get("FROM") != [f"./{student['gguf']}"]:
        problems.append(f"{path}: FROM {parsed.get('FROM')} is not ./{student['gguf']}")
    if parsed.get("TEMPLATE") != [mfile.TEMPLATE]:
        problems.append(f"{path}: TEMPLATE is not the training ChatML template")
    if parsed.get("SYSTEM") != [system_prompt()]:
        problems.append(f"{path}: SYSTEM is not prompts/SYSTEM.txt")
    return problems


def check_gguf(path: Path, n_ctx: int, threads: int | None) -> list[str]:
    """Load the GGUF and answer one constrained extraction request through the codec, in a
    child process: a native crash of llama.cpp becomes a problem naming the file."""
    code = ("import json, sys; from memworker.export.verify import _gguf_problems; "
            "print(json.dumps(_gguf_problems(sys.argv[1], int(sys.argv[2]), "
            "int(sys.argv[3]) or None)))")
    proc = subprocess.run([sys.executable, "-c", code, str(path), str(n_ctx), str(threads or 0)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        why = (f"signal {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
               else f"exit status {proc.returncode}")
        last = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or [""]
        return [f"{path}: llama.cpp crashed loading or running it ({why}) {last[0][:200]}"
                .rstrip()]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _gguf_problems(path: str | Path, n_ctx: int, threads: int | None) -> list[str]:
    try:
        backend = LlamaCppBackend(path, n_ctx=n_ctx, n_threads=threads)
    except BackendError as exc:
        return [f"{path}: does not load in llama.cpp ({exc})"]
    try:
        result = codec.run(backend, "extract", EXTRACT[0])
    except codec.CodecError as exc:
        return [f"{path}: the constrained extraction request failed after the retry "
                f"({type(exc).__name__}: {str(exc)[:200]})"]
    except BackendError as exc:
        return [f"{path}: llama.cpp failed on the extraction request ({exc})"]
    if not isinstance(result, codec.CodecResult):
        return [f"{path}: the codec returned {type(result).__name__}, not a CodecResult"]
    return []


def check_replay(folder: Path, receipt: dict[str, Any], evaluation: Path, corpus: Path, n: int,
                 threads: int | None = None,
                 make_worker: Callable[..., Any] | None = None) -> list[str]:
    """The store's worker (`MemWorkerBackend.from_release(folder)`, with its own defaults) on the
    first `n` extract windows of the evaluation folder `evaluation` (a set the release was
    evaluated on, e.g. receipts/eval/heldout; its `student` arm must have run this release's
    student GGUF, and `corpus` holds the set's rows) writes what that evaluation recorded for the
    student, byte for byte: every turn's answer in a turns form, the accepted answer otherwise.
    Windows the evaluation recorded as failed are not replayed. So the published figures are
    those of the worker a user runs, not only of the evaluator's sampler (threads, KV reuse and
    batching can change a greedy answer: inference/README "Where the worker's time goes").
    `make_worker(folder, **kwargs)` stands in for `from_release` in tests."""
    where = f"replay of {evaluation}"
    try:
        config = json.loads((evaluation / "config.json").read_text("utf-8"))
        samples = [s for s in read_samples(evaluation / "samples.jsonl")
                   if s.get("arm") == "student" and s.get("task") == "extract"]
        rows = {r["id"]: r for r in load_eval_rows(corpus, config["set"])}
    except (OSError, ValueError, KeyError, EvalError) as exc:
        return [f"{where}: unreadable ({exc})"]
    student = (receipt.get("student") or {}).get("gguf")
    want = ((receipt.get("artifacts") or {}).get(student) or {}).get("sha256")
    ran = ((config.get("gguf") or {}).get("student") or {}).get("sha256")
    if not want or ran != want:
        return [f"{where}: its student arm ran GGUF sha256 {ran}, not this release's student "
                f"({student}: {want})"]
    chosen = [s for s in samples if s.get("error") is None][:n]
    if len(chosen) < n:
        return [f"{where}: {len(chosen)} extract windows the student answered, fewer than {n}"]
    if make_worker is None:
        make_worker = MemWorkerBackend.from_release
    worker = make_worker(folder, **({"n_threads": threads} if threads else {}))
    problems = []
    for sample in chosen:
        if sample["id"] not in rows:
            problems.append(f"{where}: {sample['id']} is not a row of {corpus} {config['set']}")
            continue
        recorded = [t["raw"] for t in sample.get("turns") or []] or [sample["attempts"][-1]["raw"]]
        try:
            result = worker._run("extract", rows[sample["id"]]["input"])
        except Exception as exc:  # a codec or backend error is a difference too
            problems.append(f"{where}: {sample['id']}: the worker failed ({exc})")
            continue
        wrote = ([g.raw for g in result.turns] if result.turns is not None
                 else [result.attempts[-1].raw])
        if wrote != recorded:
            k = next((i for i, (a, b) in enumerate(zip(wrote, recorded, strict=False))
                      if a != b),
                     min(len(wrote), len(recorded)))
            problems.append(f"{where}: {sample['id']}: the worker wrote another answer than the "
                            f"evaluation recorded (turn {k} of {len(recorded)}: {wrote[k:k + 1]} "
                            f"against {recorded[k:k + 1]})")
    return problems


def check_gate(folder: Path, receipt: dict[str, Any], allow_unevaluated: bool) -> list[str]:
    return [f"{folder / RELEASE_RECEIPT}: {p}"
            for p in gate.problems(receipt, allow_unevaluated=allow_unevaluated)]


def verify_release(folder: str | Path, receipts_dir: str | Path | None = "receipts", *,
                   load: bool = True, threads: int | None = None,
                   allow_unevaluated: bool = False, replay: int = 0,
                   replay_set: str = "heldout", corpus: str | Path = "data/corpus") -> list[str]:
    """Problems found in the release `folder` (empty when it verifies), the first one first.
    `load=False` skips loading the GGUFs (the hash, receipt and gate checks only);
    `allow_unevaluated` lets a release without an evaluation pass the gate; `replay` > 0 runs
    `check_replay` on that many extract windows of `receipts_dir/eval/replay_set` (rows from
    `corpus`) after the other checks pass."""
    folder = Path(folder)
    receipts = Path(receipts_dir) if receipts_dir else None
    problems = check_sums(folder)
    receipt_path = folder / RELEASE_RECEIPT
    try:
        receipt = json.loads(receipt_path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        return problems + [f"{receipt_path}: unreadable ({exc})"]
    problems += check_receipt(folder, receipt, receipts)
    problems += check_modelfile(folder, receipt)
    problems += check_worker(folder, receipt)
    if not problems:
        problems += check_gate(folder, receipt, allow_unevaluated)
    if problems or not load:
        return problems
    n_ctx = (receipt.get("export") or {}).get("num_ctx", mfile.NUM_CTX)
    ggufs = [rel for rel in sorted(receipt.get("artifacts") or {}) if rel.endswith(".gguf")]
    if not ggufs:
        problems.append(f"{folder}: holds no GGUF")
    for rel in ggufs:
        problems += check_gguf(folder / rel, n_ctx, threads)
    for check in EXTRA_CHECKS:
        problems += check(folder, receipt)
    if replay and not problems:
        if receipts is None:
            return [f"{folder}: --replay needs the receipts folder that holds the evaluations"]
        problems += check_replay(folder, receipt, receipts / "eval" / replay_set, Path(corpus),
                                 replay, threads)
    return problems

