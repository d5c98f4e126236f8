"""Export on a tiny model: refusals (fast), then a real release from tiny stage runs (slow: the
llama.cpp converter and llama-cpp-python): GGUF contents, receipt, SHA256SUMS, verify and its
failure on each tampered file, the out-folder conflict rules, and the main job's export.

The tiny base's BPE is trained in the test, so llama.cpp's converter does not recognise its
pre-tokenizer hash and refuses it; the tests force "gpt-2" (the tiny tokenizer's byte-level
regex, MEMWORKER_TOKENIZER_PRE) and check that llama.cpp then tokenizes like the HF tokenizer.
The registry bases need no such override (slow test on the embedded base at the end)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from memworker import pipeline
from memworker.export import ExportError, export_base, export_release, record_evaluation
from memworker.export import cli as ecli
from memworker.export import release as rel
from memworker.export.verify import verify_release
from memworker.hashing import sha256_file
from tests.fixtures.tiny import build_tiny_base, build_tiny_corpus

FAST = ["--no-export", "--no-qlora", "--max-steps", "3", "--grad-accum", "1",
        "--logging-steps", "1", "--save-steps", "3", "--val-rows", "2", "--eval-steps", "1000",
        "--batch-size", "2", "--lr", "0.05"]  # a large lr: the merge must visibly move weights


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A working folder like the repository's after `train/run.py --stage general-a`: tiny base,
    tiny corpora, runs/coding and runs/general-a, receipts/."""
    root = tmp_path_factory.mktemp("export")
    base = build_tiny_base(root / "base", seed=0)
    other = build_tiny_base(root / "other", seed=1)
    work = root / "work"
    build_tiny_corpus(work / "data" / "corpus", "general", episodes=12)
    build_tiny_corpus(work / "data" / "corpus-coding", "coding", episodes=12)
    (work / "pyproject.toml").write_text("[project]\nname = 'checkout'\n")  # publish target
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        assert pipeline.main(["--stage", "general-a", "--base", str(base), "--receipts-dir",
                          "receipts", "--no-build-corpus", *FAST]) == 0
    return {"base": base, "other": other, "work": work}


@pytest.fixture
def work(tiny, monkeypatch):
    monkeypatch.chdir(tiny["work"])
    monkeypatch.setenv("MEMWORKER_TOKENIZER_PRE", "gpt-2")
    return tiny["work"]


def _copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("checkpoints"))
    return dst


# --- refusals (nothing written) ------------------------------------------------------------------

def test_refuses_a_run_without_receipt(work, tmp_path, capsys):
    (tmp_path / "runs" / "general").mkdir(parents=True)
    out = tmp_path / "release"
    assert ecli.main(["--run", str(tmp_path / "runs" / "general"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no receipt.json" in err and "train/run.py" in err
    assert not out.exists()


def test_refuses_an_adapter_that_differs_from_the_receipt(work, tmp_path):
    run = _copy_run(work / "runs" / "general-a", tmp_path / "runs" / "general-a")
    with open(run / "adapter" / "adapter_model.safetensors", "ab") as fh:
        fh.write(b"\0")
    receipt = json.loads((run / "receipt.json").read_text("utf-8"))
    recorded = receipt["adapter"]["files"]["adapter_model.safetensors"]
    changed = sha256_file(run / "adapter" / "adapter_model.safetensors")
    with pytest.raises(ExportError) as err:
        export_release(run, tmp_path / "release")
    message = str(err.value)  # the file, both hashes, how to restore or rebuild it
    assert f"{run / 'adapter' / 'adapter_model.safetensors'}: receipt sha256 {recorded}, file " \
           f"sha256 {changed}" in message
    assert "git checkout --" in message and "python train/run.py" in message
    assert not (tmp_path / "release").exists()
    (run / "adapter" / "adapter_model.safetensors").unlink()  # missing: said so, not a traceback
    with pytest.raises(ExportError, match=f"receipt sha256 {recorded}, file sha256 missing"):
        export_release(run, tmp_path / "release")


def test_refuses_another_base(work, tiny, tmp_path):
    with pytest.raises(ExportError, match="trained on base local:base.*not on local:other"):
        export_release("runs/general-a", tmp_path / "release", base=str(tiny["other"]))
    assert not (tmp_path / "release").exists()


def test_refuses_changed_prompts_and_broken_lineage(work, tmp_path, monkeypatch):
    run = _copy_run(work / "runs" / "general-a", tmp_path / "elsewhere" / "general-a")
    monkeypatch.chdir(tmp_path)  # runs/coding (the recorded parent) is not here
    with pytest.raises(ExportError, match="lineage broken: the receipt of parent stage coding"):
        export_release(run, tmp_path / "release", receipts_dir=None)
    changed = {**rel.template_hashes(), "SYSTEM": "0" * 64}
    monkeypatch.setattr(rel, "template_hashes", lambda: changed)
    with pytest.raises(ExportError, match="prompt templates SYSTEM changed"):
        export_release(work / "runs" / "general-a", tmp_path / "release")
    assert not (tmp_path / "release").exists()


def test_refuses_a_folder_with_other_files(work, tmp_path):
    (tmp_path / "release").mkdir()
    (tmp_path / "release" / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="not empty and holds no release-receipt.json"):
        export_release("runs/general-a", tmp_path / "release")
    assert [p.name for p in (tmp_path / "release").iterdir()] == ["notes.txt"]


# --- a real release (slow) -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def release(tiny):
    """release/ with the general-a student and the base, published to the working folder."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tiny["work"])
        mp.setenv("MEMWORKER_TOKENIZER_PRE", "gpt-2")
        assert ecli.main(["--run", "runs/general-a", "--out", "release", "--with-base"]) == 0
    return tiny["work"] / "release"


def _receipt(folder: Path) -> dict:
    return json.loads((folder / "release-receipt.json").read_text())


def _gguf_tensor(path: Path, name: str):
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(path)
    tensor = next(t for t in reader.tensors if t.name == name)
    return tensor.tensor_type.name, dequantize(tensor.data, tensor.tensor_type).reshape(
        [int(x) for x in reversed(tensor.shape)])


@pytest.mark.slow
def test_release_folder_gguf_and_receipt(work, tiny, release):
    r = _receipt(release)
    student = r["student"]["gguf"]
    assert student == "memworker-local-base-general-a-q8_0.gguf"
    names = {p.relative_to(release).as_posix() for p in release.rglob("*") if p.is_file()}
    assert {student, "base-q8_0.gguf", "Modelfile", "README.md", "release-receipt.json",
            "SHA256SUMS", "adapter/adapter_model.safetensors"} <= names
    assert subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=release).returncode == 0
    # lineage: every stage receipt in training order, hashes of the run receipts
    assert [s["stage"] for s in r["lineage"]] == ["coding", "general-a"]
    for stage in r["lineage"]:
        assert stage["receipt_sha256"] == sha256_file(f"runs/{stage['stage']}/receipt.json")
    manifest = json.loads(Path("data/corpus/manifest.json").read_text())
    assert r["corpus"]["manifest_sha256"] == sha256_file("data/corpus/manifest.json")
    assert r["corpus"]["heldout"]["sha256"] == manifest["files"]["heldout.jsonl"]
    assert r["evaluation"] is None and r["gate"]["verdict"] == "unevaluated"
    assert r["worker"] == {"extract_form": "window", "claim_gate": None}
    assert r["known_limitations"]
    assert r["artifacts"][student]["sha256"] == sha256_file(release / student)
    assert r["export"]["converter"]["pre_tokenizer"] == "gpt-2"
    assert r["base_export"]["merge"]["adapter_merged"] is False
    assert r["student"]["merge"]["adapter_merged"] is True and r["student"]["merge"]["dtype"] == \
        "float32"
    assert Path("receipts/release-receipt.json").read_bytes() == \
        (release / "release-receipt.json").read_bytes()
    card = (release / "README.md").read_text()
    assert card.startswith("---\nbase_model: ") and "pipeline_tag: text-generation" in card
    assert f"{r['lineage'][-1]['result']['final_train_loss']:.4f}" in card
    # top-level Modelfile and SHA256SUMS point into release/
    assert f"FROM ./release/{student}\n" in Path("Modelfile").read_text()
    assert subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"]).returncode == 0


@pytest.mark.slow
def test_gguf_is_q8_0_of_the_merged_weights_with_metadata(work, tiny, release):
    import numpy as np
    import torch
    from llama_cpp import Llama
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    r = _receipt(release)
    base_model = AutoModelForCausalLM.from_pretrained(tiny["base"], dtype=torch.float32)
    w_base = base_model.model.layers[0].mlp.down_proj.weight.detach().numpy().copy()
    merged = PeftModel.from_pretrained(base_model, "runs/general-a/adapter").merge_and_unload()
    w_merged = merged.model.layers[0].mlp.down_proj.weight.detach().numpy()
    kind, student = _gguf_tensor(release / r["student"]["gguf"], "blk.0.ffn_down.weight")
    _, base_q = _gguf_tensor(release / "base-q8_0.gguf", "blk.0.ffn_down.weight")
    step = np.abs(w_merged).max() / 127
    assert kind == "Q8_0"
    assert np.abs(student - w_merged).max() <= step and np.abs(base_q - w_base).max() <= step
    assert np.abs(w_merged - w_base).max() > 4 * step  # the adapter moved the weights
    llm = Llama(str(release / r["student"]["gguf"]), vocab_only=True, verbose=False)
    meta = llm.metadata
    assert meta["general.name"] == "memworker-local-base-general-a"
    assert meta["general.file_type"] == "7"  # MOSTLY_Q8_0
    assert meta["general.license"] == "unknown" and meta["tokenizer.ggml.pre"] == "gpt-2"
    assert r["student"]["receipt_sha256"] in meta["general.description"]
    hf = AutoTokenizer.from_pretrained(tiny["base"])
    text = "<|im_start|>user\nI moved to Lisbon last week, 2025-10-08T09:12:00+02:00!<|im_end|>\n"
    assert llm.tokenize(text.encode(), add_bos=False, special=True) == hf.encode(text)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["memworker-local-base-general-a-q8_0.gguf",
                                    "adapter/adapter_model.safetensors", "Modelfile",
                                    "release-receipt.json"])
def test_verify_names_a_tampered_file(work, release, tmp_path, target, capsys):
    copy = shutil.copytree(release, tmp_path / "release")
    assert verify_release(copy, "receipts", load=False, allow_unevaluated=True) == []
    path = copy / target
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    problems = verify_release(copy, "receipts", load=False)
    assert problems and target in problems[0]
    assert ecli.verify_main([str(copy), "--no-load"]) == 1
    assert f"verify: FAILED: {copy / target}" in capsys.readouterr().err


@pytest.mark.slow
def test_verify_checks_the_receipt_and_committed_receipts_beyond_the_sums(work, release,
                                                                          tmp_path):
    from memworker.hashing import write_sha256sums

    copy = shutil.copytree(release, tmp_path / "release")
    gguf = copy / "base-q8_0.gguf"
    gguf.write_bytes(gguf.read_bytes()[:-1] + b"\0")  # tampered, and SHA256SUMS re-made to match
    write_sha256sums(copy, [p for p in copy.rglob("*") if p.is_file() and p.name != "SHA256SUMS"])
    assert verify_release(copy, "receipts", load=False)[0].startswith(
        f"{gguf}: differs from its sha256/size in release-receipt.json")
    receipts = shutil.copytree("receipts", tmp_path / "receipts")
    (receipts / "coding-receipt.json").write_text("{}\n")
    problems = verify_release(release, receipts, load=False)
    assert problems == [f"{receipts / 'coding-receipt.json'}: sha256 differs from the lineage in "
                        "release-receipt.json"]
    assert verify_release(release, tmp_path / "nowhere", load=False)[0].endswith(
        "pass --receipts-dir '' to check a release without the repository")


@pytest.mark.slow
def test_verify_loads_each_gguf_and_answers_through_the_codec(work, release, capsys):
    assert ecli.verify_main([str(release), "--threads", "1", "--allow-unevaluated"]) == 0
    assert f"verify: {release} OK" in capsys.readouterr().out


@pytest.mark.slow
def test_a_gguf_that_does_not_load_is_a_named_problem(release, tmp_path):
    from memworker.export.verify import check_gguf

    broken = tmp_path / "broken.gguf"
    broken.write_bytes((release / "base-q8_0.gguf").read_bytes()[:4096])
    problems = check_gguf(broken, 512, 1)
    assert len(problems) == 1 and problems[0].startswith(f"{broken}: ")


@pytest.mark.slow
def test_out_folder_conflicts(work, tiny, release, tmp_path):
    out = shutil.copytree(release, tmp_path / "release")
    before = sha256_file(out / "SHA256SUMS")
    with pytest.raises(ExportError, match="holds another release .*stage general-a run"):
        export_release("runs/coding", out, receipts_dir=None)
    with pytest.raises(ExportError, match="holds another release .*base local:base"):
        export_base(out, base_key=str(tiny["other"]), receipts_dir=None)
    assert sha256_file(out / "SHA256SUMS") == before
    # the same base joins a release (force or not: it is not another release); force replaces
    # another release
    export_base(out, base_key=str(tiny["base"]), receipts_dir=None, force=True)
    assert (out / "memworker-local-base-general-a-q8_0.gguf").is_file()
    problems = verify_release(out, "receipts", load=False)  # receipts/ holds the first release's
    assert problems == [f"receipts/release-receipt.json: differs from {out}/release-receipt.json "
                        "(another release)"]
    r = export_release("runs/coding", out, receipts_dir=None, force=True)
    assert r["student"]["stage"] == "coding" and not (out / "base-q8_0.gguf").exists()
    assert not (out / "memworker-local-base-general-a-q8_0.gguf").exists()
    assert verify_release(out, None, load=False, allow_unevaluated=True) == []


#: the comparisons the release gate reads, as the evaluator writes them (student no worse than
#: the base, above the rules at extraction, not below them at the other tasks)
_NO_WORSE = {"a": 0.5, "b": 0.4, "diff": 0.1, "ci": [-0.1, 0.3], "n_rows": 4, "n_episodes": 4}
_ABOVE = {"a": 0.9, "b": 0.4, "diff": 0.5, "ci": [0.2, 0.8], "n_rows": 4, "n_episodes": 4}
PASSING = {"comparisons": [
    {"a": "student", "b": "base", "tasks": {"extract": {"extract_f1": _NO_WORSE}}},
    {"a": "student", "b": "rules", "tasks": {
        "extract": {"extract_support": _ABOVE, "extract_coverage": _ABOVE},
        "consolidate": {"consolidate_correct": _NO_WORSE},
        "reflect": {"reflect_correct": _NO_WORSE}}}]}


def _record_passing_live(out: Path) -> None:
    """A live acceptance in which the student passes as many scenarios as the rules (a format-2
    release gates it; tests/test_release_format2.py holds the checks)."""
    from memworker.export.receipt import record_live

    r = _receipt(out)
    sha = r["artifacts"][r["student"]["gguf"]]["sha256"]
    sampler = {"extract_form": (r.get("worker") or {}).get("extract_form", "window")}
    record_live(out, {"arms": {"student": {"passed": 2, "total": 8},
                               "rules": {"passed": 2, "total": 8}},
                      "config": {"arms": {"student": r["student"]["gguf"], "rules": "rules"},
                                 "sampler": sampler},
                      "worker": {"student": {"gguf_sha256": sha}}}, receipts_dir=None)


@pytest.mark.slow
def test_record_evaluation_re_signs_the_release(work, release, tmp_path):
    out = shutil.copytree(release, tmp_path / "release")
    _record_passing_live(out)
    record_evaluation(out, {"heldout": {**PASSING, "student": {"extract_f1": 0.5}}},
                      receipts_dir=None)
    assert _receipt(out)["evaluation"]["heldout"]["student"]["extract_f1"] == 0.5
    assert "| `heldout.student.extract_f1` | 0.5000 |" in (out / "README.md").read_text()
    assert _receipt(out)["gate"]["verdict"] == "pass"
    assert verify_release(out, None, load=False) == []
    (out / "Modelfile").write_text("tampered")
    with pytest.raises(ExportError, match="does not verify"):
        record_evaluation(out, {}, receipts_dir=None)


@pytest.mark.slow
def test_a_release_records_its_worker_and_verify_holds_the_evaluations_to_it(work, tmp_path,
                                                                              capsys):
    """`export/run.py --extract-form turns --claim-gate T`: the receipt's worker, the Modelfile's
    note; an evaluation that ran the student another way fails verify, naming the set."""
    from memworker.export import modelfile as mfile

    out = tmp_path / "gated"
    assert ecli.main(["--run", "runs/general-a", "--out", str(out), "--no-publish",
                      "--receipts-dir", "", "--extract-form", "turns", "--claim-gate",
                      "-0.249"]) == 0
    worker = _receipt(out)["worker"]
    assert worker == {"extract_form": "turns",
                      "claim_gate": "first(predicate)+first(value)>=-0.249"}
    assert mfile.worker_line(worker) in (out / "Modelfile").read_text().splitlines()
    assert verify_release(out, None, load=False, allow_unevaluated=True) == []
    shipped = {"config": {"arms": {"student": "s.gguf"}, "sampler": {"extract_form": "turns"},
                          "claim_gates": {"student": worker["claim_gate"]}}}
    ungated = {"config": {"arms": {"student": "s.gguf"}, "sampler": {"extract_form": "turns"}}}
    record_evaluation(out, {"heldout": {**PASSING, **shipped}}, receipts_dir=None)
    assert not [p for p in verify_release(out, None, load=False) if "worker" in p
                or "ran the student" in p]
    with pytest.raises(ExportError, match="evaluation test ran the student with extract form "
                                          "turns and claim gate none"):
        record_evaluation(out, {"test": {**PASSING, **ungated}}, receipts_dir=None)
    assert list(_receipt(out)["evaluation"]) == ["heldout"]   # refused: nothing written
    capsys.readouterr()
    assert ecli.main(["--run", "runs/general-a", "--out", str(tmp_path / "x"), "--no-publish",
                      "--receipts-dir", "", "--claim-gate", "max(x)>=1"]) == 2
    assert "unknown claim score" in capsys.readouterr().err


@pytest.mark.slow
def test_the_evaluators_into_receipt_re_signs_a_release(work, release, tmp_path):
    """`eval/run.py --into-receipt <receipts copy> --release DIR` goes through the receipt's
    writer (`record_set`, handed to the evaluator): the release still verifies; a receipt copy
    that is not the release's is refused, and so is a release receipt with no writer given."""
    from functools import partial

    from memworker.eval import summary as eval_summary
    from memworker.export.receipt import record_set

    merge_into_receipt = partial(eval_summary.merge_into_receipt, record_release=record_set)
    out = shutil.copytree(release, tmp_path / "release")
    _record_passing_live(out)
    receipts = tmp_path / "receipts"
    receipts.mkdir()
    shutil.copyfile(out / "release-receipt.json", receipts / "release-receipt.json")
    merge_into_receipt(receipts / "release-receipt.json", "heldout", {**PASSING, "n": 64}, out)
    assert _receipt(out)["evaluation"] == {"heldout": {**PASSING, "n": 64}}
    assert (receipts / "release-receipt.json").read_bytes() == \
        (out / "release-receipt.json").read_bytes()
    assert verify_release(out, None, load=False) == []
    merge_into_receipt(receipts / "release-receipt.json", "natural", {"n": 9}, out)
    assert set(_receipt(out)["evaluation"]) == {"heldout", "natural"}
    merge_into_receipt(out / "release-receipt.json", "natural", {"n": 7}, out)  # no copy
    assert _receipt(out)["evaluation"]["natural"] == {"n": 7}
    assert verify_release(out, None, load=False) == []
    stale = tmp_path / "stale.json"
    stale.write_text((receipts / "release-receipt.json").read_text().replace('"n": 9', '"n": 8'))
    with pytest.raises(ValueError, match="not the same file"):
        merge_into_receipt(stale, "heldout", {}, out)
    with pytest.raises(ValueError, match="signed by its release folder"):
        eval_summary.merge_into_receipt(receipts / "release-receipt.json", "heldout", {}, out)


@pytest.mark.slow
def test_the_main_job_ends_with_the_export_and_the_evaluation(tiny, tmp_path, monkeypatch,
                                                               capsys):
    """The export, then the held-out evaluation of base and student GGUFs (llama.cpp) and rules
    on the first rows, merged into the release receipt and its receipts/ copy, then the table;
    a rerun runs no row again; --no-eval and --no-export skip it."""
    work = shutil.copytree(tiny["work"], tmp_path / "w", ignore=shutil.ignore_patterns(
        "release", "Modelfile", "SHA256SUMS", "release-receipt.json"))
    monkeypatch.chdir(work)
    monkeypatch.setenv("MEMWORKER_TOKENIZER_PRE", "gpt-2")
    args = [a for a in FAST if a != "--no-export"]
    main = ["--stage", "general-a", "--base", str(tiny["base"]), "--receipts-dir", "receipts",
            "--release-dir", "release", "--no-build-corpus"]
    assert pipeline.main([*main, *args, "--eval-rows", "2"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "export: release/memworker-local-base-general-a-q8_0.gguf (" in out
    assert "export: release/base-q8_0.gguf (" in out
    total = len(Path("data/corpus/heldout.jsonl").read_text().splitlines())
    assert f"evaluation of the first 2 of the {total} held-out rows (not the full evaluation)" \
        in out
    assert "stage receipts: runs/coding/receipt.json, runs/general-a/receipt.json" in out
    assert "eval report: runs/eval/heldout/report.md" in out
    verdict = _receipt(Path("release"))["gate"]["verdict"]
    assert f"; release gate: {verdict}); check it: python export/verify.py release" in out
    summary = json.loads(Path("runs/eval/heldout/summary.json").read_text())
    assert summary["arms"] == ["base", "student", "rules"] and summary["rows"] == 2
    assert summary["config"]["sampler"]["max_tokens_cap"] == pipeline.EVAL_MAX_TOKENS
    assert summary["config"]["gguf"]["student"]["path"] == \
        "release/memworker-local-base-general-a-q8_0.gguf"
    assert _receipt(Path("release"))["evaluation"]["heldout"] == summary
    assert Path("receipts/release-receipt.json").read_bytes() == \
        Path("release/release-receipt.json").read_bytes()
    problems = verify_release("release", "receipts", load=False)
    assert all("release gate" in p for p in problems)  # the files verify; the gate judges
    assert ecli.verify_main(["release", "--no-load"]) == (1 if problems else 0)
    shown = capsys.readouterr()
    assert f"heldout: evaluated on the first 2 of the {total} held-out rows (not the full " \
        "evaluation), gated like a full one" in (shown.err if problems else shown.out)
    assert pipeline.main([*main, *args, "--eval-rows", "2"]) == 0  # a rerun: nothing runs again
    err = capsys.readouterr().err
    assert "arm base: 0 rows run, 2 already done" in err
    assert "arm student: 0 rows run, 2 already done" in err
    assert pipeline.main([*main, *args, "--no-eval"]) == 0
    assert "evaluation of" not in capsys.readouterr().out
    assert pipeline.main([*main, *FAST]) == 0
    assert "export:" not in (out := capsys.readouterr().out) and "evaluation of" not in out


@pytest.mark.slow
def test_the_main_job_continues_the_committed_release_and_runs_its_worker(tiny, tmp_path,
                                                                        monkeypatch, capsys):
    """The cpu profile's main job (`parent_from: release`): the stage warm-starts from the run
    the committed release receipt names, and the export and the evaluation run the release's
    worker (here the turns form, proposing, gated), not the window form."""
    work = shutil.copytree(tiny["work"], tmp_path / "w", ignore=shutil.ignore_patterns(
        "release", "Modelfile", "SHA256SUMS", "release-receipt.json"))
    monkeypatch.chdir(work)
    monkeypatch.setenv("MEMWORKER_TOKENIZER_PRE", "gpt-2")
    shutil.copytree("runs/general-a", "committed/proof/general-a")
    Path("committed/receipts").mkdir()
    gate = "first(predicate)+first(value)>=-0.055"
    Path("committed/receipts/release-receipt.json").write_text(json.dumps(
        {"student": {"run_dir": "proof/general-a", "stage": "general-a",
                     "receipt_sha256": sha256_file("committed/proof/general-a/receipt.json")},
         "worker": {"extract_form": "turns", "claim_gate": gate, "propose": True}}))
    monkeypatch.setenv("MEMWORKER_COMMITTED_RECEIPTS", "committed/receipts")
    args = [a for a in FAST if a != "--no-export"]
    assert pipeline.main(["--stage", "general", "--base", str(tiny["base"]), "--receipts-dir",
                          "receipts", "--release-dir", "release", "--no-build-corpus",
                          "--runs-dir", "fresh", "--parent-from", "release", "--replay-fraction",
                          "0", *args, "--eval-rows", "2"]) == 0
    out = capsys.readouterr().out
    assert "warm-starts from the committed release's student (committed/proof/general-a" in out
    assert ("stage receipts: fresh/general/receipt.json (trained here; copy in receipts/), "
            "warm-started from the committed release's student committed/proof/general-a/"
            "receipt.json (its chain coding → general-a: receipts/<stage>-receipt.json") in out
    assert not Path("fresh/general-a").exists() and not Path("fresh/coding").exists()
    release = _receipt(Path("release"))
    assert release["worker"] == {"extract_form": "turns", "claim_gate": gate, "propose": True}
    config = json.loads(Path("fresh/eval/heldout/config.json").read_text())
    assert config["sampler"]["extract_form"] == "turns"
    assert config["proposing"] == ["student"] and config["claim_gates"] == {"student": gate}


@pytest.mark.slow
def test_the_main_job_leaves_every_committed_file_as_it_was(tiny, tmp_path, monkeypatch, capsys):
    """Issue 45: a newcomer runs the main job, then the tests; the main job must not rewrite the
    committed release (receipts/, the top-level Modelfile and SHA256SUMS). In a git checkout
    holding a committed release, the main job with its default folders writes its release,
    receipts and evaluation under runs/ and `git status` shows no committed file changed."""
    work = shutil.copytree(tiny["work"], tmp_path / "clone", ignore=shutil.ignore_patterns(
        "release", "runs"))
    monkeypatch.chdir(work)
    monkeypatch.setenv("MEMWORKER_TOKENIZER_PRE", "gpt-2")
    Path(".gitignore").write_text("data/\nruns/\nrelease/\n")
    Path("Modelfile").write_text("FROM ./release/committed.gguf\n")
    Path("SHA256SUMS").write_text("0" * 64 + "  release/committed.gguf\n")
    Path("receipts/release-receipt.json").write_text('{"committed": true}\n')

    def git(*argv):
        return subprocess.run(["git", *argv], check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a committed release")
    args = [a for a in FAST if a != "--no-export"]
    assert pipeline.main(["--stage", "general-a", "--base", str(tiny["base"]),
                          "--no-build-corpus", *args, "--eval-rows", "2"]) == 0
    out = capsys.readouterr().out
    assert "export: runs/release/memworker-local-base-general-a-q8_0.gguf (" in out
    assert Path("runs/release/release-receipt.json").is_file()
    assert Path("runs/receipts/release-receipt.json").is_file()  # its receipts, under runs/
    assert git("status", "--porcelain", "--untracked-files=all") == ""


@pytest.mark.slow
def test_embedded_base_exports_and_answers(tmp_path, monkeypatch):
    """The real base through the same path: its tokenizer needs no override, and the Q8_0 GGUF
    answers a constrained extraction request through the codec."""
    monkeypatch.delenv("MEMWORKER_TOKENIZER_PRE", raising=False)
    path = export_base(tmp_path / "release", receipts_dir=None)
    assert path.name == "base-q8_0.gguf"
    r = _receipt(tmp_path / "release")
    assert r["base"]["key"] == "smollm2-135m" and r["license"] == "apache-2.0"
    assert r["base_export"]["conversion"]["pre_tokenizer"] is None
    assert verify_release(tmp_path / "release", None) == []
