"""Smoke tests of whole stage runs on a tiny local model: receipt, lineage, guards, resume,
NF4 on CPU, and `accelerate launch` with two CPU processes."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import TrainerCallback

from memworker import pipeline
from memworker.hashing import sha256_file, sha256_json
from memworker.prompts import template_hashes
from memworker.train import loop as tloop

REPO = Path(__file__).resolve().parents[1]
FAST = ["--no-export", "--no-qlora", "--max-steps", "3", "--grad-accum", "1",
        "--logging-steps", "1", "--save-steps", "2", "--val-rows", "3", "--eval-steps", "1000", "--batch-size", "2"]


def train(stage: str, base: Path, *extra: str) -> int:
    return pipeline.main(["--stage", stage, "--base", str(base), "--receipts-dir", "receipts",
                     "--no-build-corpus", *FAST, *extra])


def receipt(stage: str) -> dict:
    return json.loads(Path(f"runs/{stage}/receipt.json").read_text())


def test_a_stage_run_writes_a_complete_receipt(work, assets, capsys):
    assert train("coding", assets["base"]) == 0
    r = receipt("coding")
    manifest = json.loads(Path("data/corpus-coding/manifest.json").read_text())
    assert r["stage"] == "coding" and r["parent"] is None
    assert r["base"]["weights_sha256"] == sha256_json(
        {"model.safetensors": sha256_file(assets["base"] / "model.safetensors")})
    assert r["data"]["split_sha256"] == {s: manifest["files"][f"wire/{s}.jsonl"]
                                         for s in ("train", "val")}
    assert r["data"]["manifest_sha256"] == sha256_file("data/corpus-coding/manifest.json")
    train_stats = r["data"]["train"]
    assert train_stats["rows"] > 0 and train_stats["excluded"] == {}
    assert 0 < train_stats["tokens_answer"] < train_stats["tokens_total"]
    tasks = train_stats["tasks"]  # each task's share of the loss, recorded (natural here)
    assert sum(t["answer_tokens"] for t in tasks.values()) == train_stats["tokens_answer"]
    assert sum(t["share"] for t in tasks.values()) == pytest.approx(1, abs=1e-3)
    assert all(t["share"] == t["natural_share"] and t["multiplier"] == 1 for t in tasks.values())
    assert train_stats["tokens_max"] >= train_stats["tokens_mean"] > 0
    assert r["data"]["val"]["rows"] == 3
    assert r["prompts_sha256"] == template_hashes()
    assert r["config_sha256"] == sha256_json(r["config"]) and r["config"]["max_steps"] == 3
    res = r["result"]
    assert res["global_step"] == 3 and math.isfinite(res["final_train_loss"])
    assert res["tokens_per_s"] > 0 and res["s_per_step"] > 0 and math.isfinite(res["val_loss"])
    assert res["shared_prefix_tokens_main_process"] > 0  # batches of 2 shared their opening
    assert r["memory_peak"]["rss_bytes"] > 10**7
    assert r["trainer_state_sha256"] == sha256_file("runs/coding/trainer_state.json")
    assert r["adapter"]["files"]["adapter_model.safetensors"] == sha256_file(
        "runs/coding/adapter/adapter_model.safetensors")
    env = r["environment"]
    assert env["libraries"]["torch"] and env["hardware"]["cpus"] and "commit" in env["git"]
    assert r["args"]["argv"][:2] == ["--stage", "coding"]
    assert Path("runs/coding/loss.png").read_bytes()[:4] == b"\x89PNG"
    assert Path("receipts/coding-receipt.json").read_bytes() == Path(
        "runs/coding/receipt.json").read_bytes()
    assert json.loads(Path("runs/coding/config.json").read_text())["config_sha256"] == r[
        "config_sha256"]
    assert "receipt runs/coding/receipt.json" in capsys.readouterr().out

    # the same command again does not retrain; another config in the same folder is refused
    before = Path("runs/coding/receipt.json").read_bytes()
    assert train("coding", assets["base"]) == 0
    assert "already trained" in capsys.readouterr().out
    assert Path("runs/coding/receipt.json").read_bytes() == before
    assert train("coding", assets["base"], "--lr", "1e-3") == 2
    assert "--fresh" in capsys.readouterr().err
    shares = ",".join(f"{t}={2 if t == 'extract' else 1}" for t in tasks)
    assert train("coding", assets["base"], "--lr", "1e-3", "--fresh", "--task-shares", shares) == 0
    assert receipt("coding")["config"]["learning_rate"] == 1e-3
    weighted = receipt("coding")["data"]["train"]["tasks"]
    assert {t: v["share"] for t, v in weighted.items()} == pytest.approx(
        {t: (2 if t == "extract" else 1) / (len(tasks) + 1) for t in tasks}, abs=1e-4)
    assert "task shares of the loss" in capsys.readouterr().out


def test_general_runs_its_missing_parents_first_and_records_lineage(work, assets, capsys):
    assert train("general", assets["base"]) == 0
    out = capsys.readouterr().out
    assert "coding has no finished run" in out and "general-a has no finished run" in out
    coding, general_a, general = (receipt(s) for s in ("coding", "general-a", "general"))
    assert general_a["parent"]["receipt_sha256"] == sha256_file("runs/coding/receipt.json")
    assert general_a["parent"]["adapter_sha256"] == coding["adapter"]["sha256"]
    assert general["parent"]["receipt_sha256"] == sha256_file("runs/general-a/receipt.json")
    assert coding["config"]["max_steps"] == 3  # inherited flag
    assert coding["config"]["learning_rate"] != general["config"]["learning_rate"]
    replay = general["data"]["replay"]
    assert replay["rows"] > 0 and replay["fraction"] <= 0.2
    assert general["data"]["train"]["rows"] > general_a["data"]["train"]["rows"]
    for name in ("coding", "general-a", "general"):
        assert Path(f"receipts/{name}-receipt.json").is_file()


def test_parent_run_is_the_parent_and_no_stage_runs_on_its_behalf(work, assets, capsys):
    assert train("coding", assets["base"], "--runs-dir", "elsewhere") == 0
    assert train("general-a", assets["base"], "--parent-run", "elsewhere/coding") == 0
    assert "has no finished run" not in capsys.readouterr().out
    assert not Path("runs/coding").exists()  # the chain did not rebuild the parent
    assert receipt("general-a")["parent"]["receipt_sha256"] == sha256_file(
        "elsewhere/coding/receipt.json")


GATE = "first(predicate)+first(value)>=-0.055"


def _committed_release(student: dict, worker: dict | None = None) -> None:
    """A clone's receipts/ in clone/: its release receipt names a student run under clone/."""
    Path("clone/receipts").mkdir(parents=True, exist_ok=True)
    Path("clone/receipts/release-receipt.json").write_text(json.dumps(
        {"student": student, "worker": worker or {"extract_form": "turns", "claim_gate": GATE,
                                                  "propose": True}}))


def test_a_stage_warm_starts_from_the_committed_release_student(work, assets, capsys,
                                                                monkeypatch):
    """`parent_from: release` (the cpu profile's main job): the parent is the run the committed
    release receipt names, nothing before the stage is trained, and the export and evaluation
    run the release's worker."""
    assert train("general-a", assets["base"], "--runs-dir", "clone/proof") == 0
    capsys.readouterr()
    parent = "clone/proof/general-a/receipt.json"
    _committed_release({"run_dir": "proof/general-a", "stage": "general-a",
                        "receipt_sha256": sha256_file(parent)})
    monkeypatch.setenv("MEMWORKER_COMMITTED_RECEIPTS", "clone/receipts")
    assert train("general", assets["base"], "--parent-from", "release") == 0
    out = capsys.readouterr().out
    assert "warm-starts from the committed release's student (clone/proof/general-a" in out
    assert "has no finished run" not in out
    assert not Path("runs/coding").exists() and not Path("runs/general-a").exists()
    general = receipt("general")
    assert general["parent"]["receipt_sha256"] == sha256_file(parent)
    assert general["config"]["parent_from"] == "release"
    assert pipeline.release_worker_flags(general, "student") == [
        "--extract-form", "turns", "--claim-gate", f"student={GATE}", "--propose", "student"]
    assert pipeline.release_worker_flags(general) == [
        "--extract-form", "turns", "--claim-gate", GATE, "--propose"]
    assert pipeline.release_worker_flags(receipt("general") | {"config": {}}) == []
    # a stage run the usual way keeps no parent_from in its config (earlier sha256s unchanged)
    assert "parent_from" not in json.loads(Path(parent).read_text())["config"]


def test_a_stage_warm_starts_from_the_parent_of_a_release_student_of_that_stage(
        work, assets, capsys, monkeypatch):
    """Release v4's student is a `general` run: the main job's `general` warm-starts from its
    parent, the committed chain's `general-a` run, checked against the student's receipt."""
    assert train("general-a", assets["base"], "--runs-dir", "proof") == 0
    assert train("general", assets["base"], "--runs-dir", "proof",
                 "--parent-run", "proof/general-a") == 0
    capsys.readouterr()
    Path("receipts").mkdir(exist_ok=True)
    Path("receipts/release-receipt.json").write_text(json.dumps(
        {"student": {"run_dir": "proof/general", "stage": "general",
                     "receipt_sha256": sha256_file("proof/general/receipt.json")},
         "worker": {"extract_form": "turns", "claim_gate": GATE, "propose": True}}))
    monkeypatch.setenv("MEMWORKER_COMMITTED_RECEIPTS", "receipts")
    assert train("general", assets["base"], "--parent-from", "release") == 0
    assert ("warm-starts from the committed release chain's general-a run (the parent of its "
            "student, proof/general) (proof/general-a") in capsys.readouterr().out
    assert receipt("general")["parent"]["receipt_sha256"] == sha256_file(
        "proof/general-a/receipt.json")
    # the student's recorded parent must be the committed one
    parent = json.loads(Path("proof/general/receipt.json").read_text())["parent"]["run_dir"]
    with open(Path(parent) / "receipt.json", "a") as fh:
        fh.write("\n")
    assert train("general", assets["base"], "--parent-from", "release", "--fresh") == 2
    assert "differs from the receipt the release records" in capsys.readouterr().err


@pytest.mark.parametrize("student, says", [
    ({"run_dir": "proof/general-a", "stage": "coding"}, "of stage 'coding', not 'general-a'"),
    ({"run_dir": "proof/general-a", "stage": "general-a", "receipt_sha256": "0" * 64},
     "differs from the receipt the release records"),
    ({"run_dir": "proof/gone", "stage": "general-a"}, "has no receipt.json"),
    (None, "no committed release receipt"),
])
def test_a_release_parent_that_does_not_fit_is_refused(work, assets, capsys, monkeypatch,
                                                       student, says):
    assert train("general-a", assets["base"], "--runs-dir", "clone/proof") == 0
    if student is not None:
        _committed_release(student)
    monkeypatch.setenv("MEMWORKER_COMMITTED_RECEIPTS", "clone/receipts")
    capsys.readouterr()
    assert train("general", assets["base"], "--parent-from", "release") == 2
    err = capsys.readouterr().err
    assert says in err and "--parent-from stage" in err
    assert not Path("runs/general").exists() and not Path("runs/general-a").exists()


def test_parent_from_is_checked(work, assets, capsys):
    assert train("coding", assets["base"], "--parent-from", "release") == 2
    assert "parent_from release needs a stage with a parent" in capsys.readouterr().err
    assert train("general", assets["base"], "--parent-from", "hub") == 2
    assert "parent_from must be one of stage, release" in capsys.readouterr().err


def test_missing_parent_is_refused_with_the_command_when_asked(work, assets, capsys):
    assert train("general-a", assets["base"], "--no-parents") == 2
    err = capsys.readouterr().err
    assert "python train/run.py --stage coding --base" in err and "--max-steps 3" in err
    assert not Path("runs/general-a").exists()


def test_parent_trained_on_another_base_is_refused(work, assets, capsys):
    assert train("coding", assets["other_base"]) == 0
    assert train("general-a", assets["base"]) == 2
    assert "was trained on base local:other" in capsys.readouterr().err


def test_tampered_parent_adapter_is_refused(work, assets, capsys):
    assert train("coding", assets["base"]) == 0
    with open("runs/coding/adapter/adapter_model.safetensors", "ab") as fh:
        fh.write(b"\0")
    assert train("general-a", assets["base"]) == 2
    assert "differs from its receipt" in capsys.readouterr().err


def test_tampered_corpus_is_refused(work, assets, capsys):
    with open("data/corpus-coding/wire/train.jsonl", "a") as fh:
        fh.write("\n")
    assert train("coding", assets["base"]) == 2
    err = capsys.readouterr().err
    assert "does not verify" in err and "sha256 mismatch" in err
    assert not Path("runs/coding/receipt.json").exists()


def test_a_stage_refuses_a_corpus_other_than_the_pinned_one(work, assets, capsys):
    pinned = sha256_file("data/corpus-coding/manifest.json")
    assert train("coding", assets["base"], "--corpus-sha256", "0" * 64) == 2
    err = capsys.readouterr().err
    assert f"pins corpus manifest sha256 {'0' * 64}, but data/corpus-coding/manifest.json is " \
           f"{pinned}" in err and err.count("\n") == 1
    assert not Path("runs/coding/receipt.json").exists()
    assert train("coding", assets["base"], "--corpus-sha256", pinned) == 0
    receipt = json.loads(Path("runs/coding/receipt.json").read_text())
    assert receipt["data"]["manifest_sha256"] == pinned


def test_missing_corpus_says_which_command_builds_it(work, assets, capsys):
    shutil.rmtree("data/corpus-coding")
    assert train("coding", assets["base"]) == 2
    assert "python corpus/build.py --out data/corpus-coding --seed 13 --domain coding" in (
        capsys.readouterr().err)


def test_too_long_rows_are_excluded_and_counted(work, assets, capsys):
    lengths = sorted(receipt_lengths(assets))
    cut = lengths[len(lengths) // 2]
    assert train("coding", assets["base"], "--max-length", str(cut), "--val-rows", "0") == 0
    data = receipt("coding")["data"]
    assert data["train"]["excluded"]["too_long"] > 0 and data["train"]["tokens_max"] <= cut
    assert data["train"]["longest_excluded"] > cut
    assert train("coding", assets["base"], "--max-length", "16", "--fresh") == 2
    assert "raise --max-length" in capsys.readouterr().err


def receipt_lengths(assets) -> list[int]:
    from transformers import AutoTokenizer

    from memworker.corpus import load_rows

    tok = AutoTokenizer.from_pretrained(assets["base"])
    return [len(tok.apply_chat_template(r["messages"], tokenize=True, return_dict=False))
            for r in load_rows(assets["coding"], "train")]


class Crash(TrainerCallback):
    """Simulates a killed run: raises right after the checkpoint of step `at` is written."""

    def __init__(self, at: int):
        self.at = at

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            raise KeyboardInterrupt("simulated interruption")


def test_an_interrupted_run_resumes_to_the_same_losses(work, assets, monkeypatch):
    args = ["--max-steps", "6", "--save-steps", "2", "--lora-dropout", "0.1", "--batch-size", "4",
            "--max-batch-tokens", "2500"]
    assert train("coding", assets["base"], *args, "--out", "runs/straight") == 0
    straight = json.loads(Path("runs/straight/trainer_state.json").read_text())["log_history"]

    original = tloop.RunRequest.__init__

    def with_crash(self, *a, **kw):
        original(self, *a, **kw)
        self.callbacks.append(Crash(at=4))

    monkeypatch.setattr(tloop.RunRequest, "__init__", with_crash)
    with pytest.raises(KeyboardInterrupt):
        train("coding", assets["base"], *args, "--out", "runs/resumed")
    assert not Path("runs/resumed/receipt.json").exists()
    monkeypatch.setattr(tloop.RunRequest, "__init__", original)
    assert train("coding", assets["base"], *args, "--out", "runs/resumed") == 0
    resumed = json.loads(Path("runs/resumed/receipt.json").read_text())
    assert resumed["result"]["resumed_from"] == "checkpoint-4"
    assert resumed["result"]["steps_this_session"] == 2
    log = json.loads(Path("runs/resumed/trainer_state.json").read_text())["log_history"]

    def losses(history):
        return {h["step"]: h["loss"] for h in history if "loss" in h}

    assert sorted(losses(log)) == sorted(losses(straight)) == [1, 2, 3, 4, 5, 6]
    for step, value in losses(straight).items():
        assert abs(losses(log)[step] - value) < 1e-4, step


def test_the_production_architecture_trains_with_shared_prefixes(work, assets):
    """A tiny random Qwen3 (the production base's architecture) through the same path."""
    assert train("coding", assets["qwen3"], "--batch-size", "3") == 0
    r = receipt("coding")
    assert r["result"]["shared_prefix_tokens_main_process"] > 0
    assert math.isfinite(r["result"]["final_train_loss"])


def test_nf4_qlora_runs_on_cpu(work, assets):
    assert train("coding", assets["base"], "--qlora", "--max-steps", "2") == 0
    r = receipt("coding")
    assert r["config"]["qlora"] and math.isfinite(r["result"]["final_train_loss"])
    config = json.loads(Path("runs/coding/adapter/adapter_config.json").read_text())
    assert config["r"] == 16 and config["lora_alpha"] == 32


def test_accelerate_launch_with_two_cpu_processes(work, assets):
    """Two CPU processes (torchrun + gloo). `accelerate launch --cpu --num_processes 2` starts one
    process unless MPI is configured, so the multi-process launcher is asked for explicitly.
    With a vanishing learning rate the validation loss must equal a single-process run's."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    same = ["--lr", "1e-12", "--val-rows", "3"]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
           "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           str(REPO / "train" / "run.py"), "--stage", "coding", "--base", str(assets["base"]),
           "--receipts-dir", "", "--no-build-corpus", *FAST, *same, "--out", "runs/ddp"]
    # in a session of its own: a launcher that outlives the timeout is killed with its workers,
    # which would otherwise stay behind waiting on each other (seen when the machine was busy)
    launcher = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    try:
        _, stderr = launcher.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.communicate()
        raise
    assert launcher.returncode == 0, stderr[-3000:]
    ddp = json.loads(Path("runs/ddp/receipt.json").read_text())
    assert ddp["device"]["world_size"] == 2 and ddp["result"]["global_step"] == 3
    assert ddp["result"]["tokens_this_session"] > 0
    assert train("coding", assets["base"], *same, "--out", "runs/single") == 0
    single = json.loads(Path("runs/single/receipt.json").read_text())
    assert single["device"]["world_size"] == 1
    assert abs(ddp["result"]["val_loss"] - single["result"]["val_loss"]) < 1e-4


def test_a_task_with_share_0_is_left_out_of_training_and_validation(assets):
    """`--task-shares extract=0,...`: the stage trains and validates on the other tasks only, and
    its provenance names the task left out."""
    from memworker.train import config as tconfig

    def prepared(shares: str) -> dict:
        cfg = tconfig.load_stage("coding", overrides={
            "corpus": str(assets["coding"]), "task_shares": shares, "val_rows": 4})
        return tloop.prepare_data(cfg)

    everything = prepared("")
    assert {r["task"] for r in everything["train"]} == {"extract", "consolidate", "reflect"}
    some = prepared("extract=0,consolidate=1,reflect=1")
    assert {r["task"] for r in some["train"]} == {"consolidate", "reflect"}
    assert {r["task"] for r in some["val"]} <= {"consolidate", "reflect"}
    assert len(some["val"]) == 4  # val_rows counts the rows of the trained tasks
    assert some["train"] == [r for r in everything["train"] if r["task"] != "extract"]
    assert some["provenance"]["left_out_tasks"] == ["extract"]
    assert "left_out_tasks" not in everything["provenance"]


def test_merged_days_add_the_chosen_windows_in_fewer_longer_messages(assets):
    """`--merged-days S`: an S share of the train extract windows is also trained with each
    day's user messages merged into one (labels carried over: the turns' answers decode to the
    merged window's gold); val is unchanged; the provenance counts the rows."""
    import json as _json

    from memworker import packing, turns, wire
    from memworker.corpus import load_rows
    from memworker.train import config as tconfig

    def prepared(**over) -> dict:
        cfg = tconfig.load_stage("coding", overrides={
            "corpus": str(assets["coding"]), "val_rows": 4, "extract_form": "turns", **over})
        return tloop.prepare_data(cfg)

    plain, merged = prepared(), prepared(merged_days=1.0)
    added = [r for r in merged["train"] if r["id"].endswith("+merged")]
    assert added and len(merged["train"]) == len(plain["train"]) + len(added)
    assert merged["val"] == plain["val"]
    assert merged["provenance"]["merged_days"] == {"share": 1.0, "rows": len(added)}
    assert "merged_days" not in plain["provenance"]
    canonical = {r["id"]: r for r in load_rows(assets["coding"], "train", form="canonical")}
    for row in added:
        window = packing.merge_row(canonical[row["id"][:-len("+merged")]])
        answers = [_json.loads(m["content"]) for m in row["messages"] if m["role"] == "assistant"]
        assert len(answers) == len(turns.turn_events(window["input"]["events"]))
        got = wire.from_wire("extract", turns.merge_claims(answers), window["input"])
        assert wire.comparable_answer("extract", got) == \
            wire.comparable_answer("extract", window["gold"])
    half = prepared(merged_days=0.5)["provenance"]["merged_days"]["rows"]
    assert 0 < half < len(added)
    with pytest.raises(tconfig.ConfigError, match="merged_days"):
        tconfig.load_stage("coding", overrides={"merged_days": 1.5}).validate()


def test_the_sentences_form_asks_each_sentence_and_decodes_back_to_the_gold(assets):
    """`--extract-form sentences`: every train extract window with user words becomes one
    conversation of one turn per sentence, whose answers decode back to the window's gold; the
    provenance names the form."""
    import json as _json

    from memworker import turns, wire
    from memworker.corpus import load_rows
    from memworker.train import config as tconfig

    cfg = tconfig.load_stage("coding", overrides={
        "corpus": str(assets["coding"]), "val_rows": 4, "extract_form": "sentences"})
    data = tloop.prepare_data(cfg)
    assert data["provenance"]["extract_form"] == "sentences"
    canonical = {r["id"]: r for r in load_rows(assets["coding"], "train", form="canonical")}
    rows = [r for r in data["train"] if r["task"] == "extract"]
    assert rows
    more = 0
    for row in rows:
        window = canonical[row["id"]]
        answers = [_json.loads(m["content"]) for m in row["messages"] if m["role"] == "assistant"]
        asked = turns.asked(window["input"]["events"], "sentences")
        assert len(answers) == len(asked)
        more += len(asked) > len(turns.turn_events(window["input"]["events"]))
        got = wire.from_wire("extract", turns.merge_claims(answers), window["input"])
        assert wire.comparable_answer("extract", got) == \
            wire.comparable_answer("extract", window["gold"])
    assert more  # some message holds more than one sentence


def test_read_once_trains_one_row_per_turn_batched_by_window(assets):
    """`--turn-history none` (turns forms): each window's turns-form conversation becomes one row
    per turn, the window's prompt with that turn's line alone and that turn's answer, exactly
    the prompt the codec sends read once (`turns.once_messages`); the turns of one window are
    batched together (`data.batch_group`), so their shared opening is the whole window and runs
    once (`PadCollator(share_prefix=True)`); other tasks are unchanged; the provenance counts
    windows and rows. Refused outside the turns forms and beside merged_days."""
    from memworker import turns
    from memworker.corpus import load_rows
    from memworker.train import config as tconfig
    from memworker.train import data as tdata
    from memworker.train.model import load_tokenizer

    def prepared(**over) -> dict:
        cfg = tconfig.load_stage("coding", overrides={
            "corpus": str(assets["coding"]), "val_rows": 4, "extract_form": "turns", **over})
        return tloop.prepare_data(cfg)

    today, once = prepared(), prepared(turn_history="none")
    canonical = {r["id"]: r for r in load_rows(assets["coding"], "train", form="canonical")}
    windows = [r for r in today["train"] if r["task"] == "extract"]
    rows = [r for r in once["train"] if r["task"] == "extract"]
    assert [r for r in once["train"] if r["task"] != "extract"] == \
        [r for r in today["train"] if r["task"] != "extract"]
    assert len(rows) == sum(len(turns.asked(canonical[w["id"]]["input"]["events"]))
                            for w in windows) > len(windows)
    for window in windows:
        mine = [r for r in rows if r["window"] == window["id"]]
        inputs = canonical[window["id"]]["input"]
        answers = [m for m in window["messages"] if m["role"] == "assistant"]
        assert [r["messages"] for r in mine] == [
            turns.once_messages(inputs, k) + [a] for k, a in enumerate(answers)]
        assert [r["id"] for r in mine] == [f"{window['id']}#{k}" for k in range(len(mine))]
    assert once["provenance"]["turn_history"] == {
        "history": "none", "train_rows": [len(today["train"]), len(once["train"])],
        "val_rows": [len(today["val"]), len(once["val"])]}
    assert "turn_history" not in today["provenance"]

    tokenizer = load_tokenizer(assets["base"])
    encoded, _ = tdata.encode_rows(tokenizer, once["train"], 4096, "<|im_end|>")
    sampler = tdata.TaskBatchSampler([tdata.batch_group(e) for e in encoded],
                                     [len(e.input_ids) for e in encoded], 16, 13)
    by_source = {e.source: e for e in encoded}
    collate = tdata.PadCollator(0, share_prefix=True)
    for batch in sampler:
        groups = {tdata.batch_group(by_source[i]) for i in batch}
        assert len(groups) == 1
        first = by_source[batch[0]]
        if first.window and len(batch) > 1:   # a window's turns: the window runs once
            out = collate([{"input_ids": by_source[i].input_ids, "labels": by_source[i].labels}
                           for i in batch])
            window = next(w for w in windows if w["id"] == first.window)
            prompt = tokenizer.apply_chat_template(window["messages"][:2], tokenize=True,
                                                   return_dict=False)
            assert out["prefix_ids"].shape[1] >= len(prompt) - 12   # all but its turn line
    assert sum(len(b) for b in sampler) == len(encoded)
    for over, message in (({"extract_form": "window"}, "needs the turns or sentences form"),
                          ({"merged_days": 0.5}, "merged_days together"),
                          ({"turn_history": "some"}, "turn_history must be one of")):
        with pytest.raises(tconfig.ConfigError, match=message):
            tconfig.load_stage("coding", overrides={"extract_form": "turns",
                                                    "turn_history": "none", **over}).validate()


def test_claim_layout_v6_trains_every_extract_turn_without_quotes(assets):
    """`--claim-layout v6` (turns forms): every extract row's answers are v6 claims (no quotes,
    the trailing defaults left out) and its prompt has the v6 claim lines, read once too; the
    other tasks and the turns are as in v3; the decision weights find the v6 fields; the
    provenance names the layout."""
    from memworker import prompts, wire
    from memworker.train import config as tconfig
    from memworker.train import data as tdata
    from memworker.train.model import load_tokenizer

    def prepared(**over) -> dict:
        cfg = tconfig.load_stage("coding", overrides={
            "corpus": str(assets["coding"]), "val_rows": 4, "extract_form": "turns", **over})
        return tloop.prepare_data(cfg)

    v3, v6 = prepared(), prepared(claim_layout="v6", turn_history="none")
    assert v6["provenance"]["claim_layout"] == "v6" and "claim_layout" not in v3["provenance"]
    once = prepared(turn_history="none")
    assert len(v6["train"]) == len(once["train"])
    assert [r for r in v6["train"] if r["task"] != "extract"] == \
        [r for r in once["train"] if r["task"] != "extract"]
    written = 0
    for a, b in zip(once["train"], v6["train"], strict=True):
        if a["task"] != "extract":
            continue
        assert prompts.LAYOUT_LINES["v6"] in b["messages"][1]["content"]
        old, new = json.loads(a["messages"][-1]["content"]), json.loads(b["messages"][-1]["content"])
        assert new["claims"] == [wire.pack_v6(wire.unpack_claim(c)) for c in old["claims"]]
        written += len(new["claims"])
    assert written > 0
    # the decision weights find each v6 claim's predicate and value (None: not aligned)
    tokenizer = load_tokenizer(assets["base"])
    row = next(r for r in v6["train"] if r["task"] == "extract"
               and json.loads(r["messages"][-1]["content"])["claims"])
    (enc,), _ = tdata.encode_rows(tokenizer, [row], 4096, "<|im_end|>")
    answer = row["messages"][-1]["content"]
    weights = tdata.decision_weights(tokenizer, enc, answer, 3.0)
    assert weights is not None
    starts = {name for _, name, _ in wire.field_starts(answer)}
    assert {"predicate", "value"} <= starts and "quotes" not in starts
    assert weights.count(3.0) >= 1 + 2 * len(json.loads(answer)["claims"])
