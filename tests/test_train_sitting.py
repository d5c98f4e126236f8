"""Training across sittings on the tiny local model: a sitting budget stops a stage with a
checkpoint and no receipt (and stops the chain), `train/sitting.py save` puts the checkpoint in
the tree (sha256s, a size limit), `restore` puts it back (refusing a damaged folder), and the same
command resumes to the losses of an uninterrupted run, its receipt listing every sitting."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import TrainerCallback

from memworker import pipeline
from memworker.train import loop as tloop
from memworker.train import sitting as tsitting

FAST = ["--no-qlora", "--max-steps", "3", "--grad-accum", "1", "--logging-steps", "1",
        "--save-steps", "2", "--val-rows", "3", "--eval-steps", "1000", "--batch-size", "2"]
# the resume test's settings (tests/test_train_run.py), validating every 2 steps
EXACT = ["--max-steps", "6", "--save-steps", "4", "--lora-dropout", "0.1", "--batch-size", "4",
         "--max-batch-tokens", "2500", "--eval-steps", "2"]


def train(stage: str, base: Path, *extra: str, export: bool = False) -> int:
    return pipeline.main(["--stage", stage, "--base", str(base), "--receipts-dir", "receipts",
                          "--no-build-corpus", *([] if export else ["--no-export"]), *FAST,
                          *extra])


def sitting(*argv: str) -> int:
    return tsitting.main(list(argv))


REAL_CLOCK = tloop.SittingBudget.passed


def stop_at(monkeypatch, step: int | None, run: str = "") -> None:
    """The sitting's clock says the budget is spent from the end of `step` on (of the run whose
    folder ends in `run`, when given; None: the real clock again, as monkeypatch.undo would also
    undo the `work` fixture's chdir)."""
    def spent(self, args, state):
        return state.global_step >= step and Path(args.output_dir).parent.name.endswith(run)

    monkeypatch.setattr(tloop.SittingBudget, "passed", REAL_CLOCK if step is None else spent)


def losses(run: str) -> dict[int, float]:
    history = json.loads(Path(run, "trainer_state.json").read_text())["log_history"]
    return {h["step"]: h["loss"] for h in history if "loss" in h}


def test_a_sitting_budget_stops_the_chain_with_a_checkpoint(work, assets, capsys, monkeypatch):
    def no_export(*a, **kw):
        raise AssertionError("an unfinished stage must not be exported")

    monkeypatch.setattr(pipeline, "export_release", no_export)
    # general-a runs its missing parent coding first; 6 ms are spent before coding's first step
    code = train("general-a", assets["base"], "--sitting-minutes", "0.0001", export=True)
    assert code == tsitting.SITTING_EXIT == 3
    run = Path("runs/coding")
    assert [p.name for p in tsitting.checkpoints(run)] == ["checkpoint-1"]  # save_steps is 2
    assert not (run / "receipt.json").exists() and not (run / "adapter").exists()
    assert not Path("receipts/coding-receipt.json").exists()
    assert not Path("runs/general-a").exists()  # the child did not start
    [record] = json.loads((run / "sittings.json").read_text())
    assert record["status"] == "budget" and record["budget_minutes"] == 0.0001
    assert (record["from_step"], record["to_step"], record["max_steps"]) == (0, 1, 3)
    assert record["checkpoint"] == "checkpoint-1" and record["tokens"] > 0
    assert record["runtime_s"] > 0 and record["val_loss"] is None and "commit" in record["git"]
    out = capsys.readouterr().out
    assert "stage coding stopped at step 1 of 3" in out
    assert "python train/sitting.py save --run runs/coding --to receipts/sitting/coding" in out
    assert ("python train/sitting.py restore --from receipts/sitting/coding && python "
            "train/run.py --stage general-a") in out
    assert train("general-a", assets["base"], "--sitting-minutes", "0") == 2


def test_save_restore_and_the_same_command_resume_to_the_same_losses(work, assets, monkeypatch,
                                                                     capsys):
    assert train("coding", assets["base"], *EXACT, "--out", "runs/straight") == 0
    straight = losses("runs/straight")

    command = ["coding", assets["base"], *EXACT, "--out", "runs/resumed", "--sitting-minutes",
               "60"]
    stop_at(monkeypatch, 3)  # not a save step: the budget makes the checkpoint
    assert train(*command) == tsitting.SITTING_EXIT
    assert [p.name for p in tsitting.checkpoints("runs/resumed")] == ["checkpoint-3"]
    assert not Path("runs/resumed/receipt.json").exists()
    assert sitting("save", "--run", "runs/resumed", "--to", "receipts/sitting/coding") == 0
    saved = json.loads(Path("receipts/sitting/coding/manifest.json").read_text())
    assert saved["mode"] == "exact" and saved["checkpoint"] == "checkpoint-3"
    assert sorted(saved["files"]) == sorted([
        "config.json", "sittings.json", *(f"checkpoint-3/{n}" for n in (
            "adapter_model.safetensors", "adapter_config.json", "optimizer.pt", "scheduler.pt",
            "trainer_state.json", "rng_state.pth"))])
    assert saved["bytes_by_part"]["optimizer"] > saved["bytes_by_part"]["adapter"] > 0

    shutil.rmtree("runs")  # the sitting ends: runs/ is not in git
    stop_at(monkeypatch, None)
    assert sitting("restore", "--from", "receipts/sitting/coding") == 0
    assert "restored runs/resumed/checkpoints/checkpoint-3" in capsys.readouterr().out
    assert train(*command) == 0
    receipt = json.loads(Path("runs/resumed/receipt.json").read_text())
    assert receipt["result"]["resumed_from"] == "checkpoint-3"
    assert receipt["result"]["steps_this_session"] == 3
    first, second = receipt["sittings"]
    assert (first["status"], first["from_step"], first["to_step"]) == ("budget", 0, 3)
    assert (second["status"], second["from_step"], second["to_step"]) == ("finished", 3, 6)
    assert second["resumed_from"] == "checkpoint-3" and first["val_loss"] is not None
    assert second["val_loss"] == receipt["result"]["val_loss"]
    assert json.loads(Path("runs/resumed/sittings.json").read_text()) == receipt["sittings"]

    resumed = losses("runs/resumed")
    assert sorted(resumed) == sorted(straight) == [1, 2, 3, 4, 5, 6]
    for step, value in straight.items():  # equal to 1e-7 here; without the saved RNG state
        assert abs(resumed[step] - value) < 1e-6, step  # step 4 differs by 1e-4


def test_a_killed_sitting_loses_only_the_steps_since_its_saved_checkpoint(work, assets,
                                                                         monkeypatch):
    """The sitting is killed after checkpoint 4 was saved to the tree (from another shell, while
    training ran): the next sitting resumes there, and the lineage names the killed sitting."""
    assert train("coding", assets["base"], *EXACT, "--save-steps", "2", "--out",
                 "runs/straight") == 0

    class Killed(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step == 4:
                assert sitting("save", "--run", "runs/resumed", "--to", "saved") == 0
                raise KeyboardInterrupt("the sitting ends")

    original = tloop.RunRequest.__init__

    def killed(self, *a, **kw):
        original(self, *a, **kw)
        self.callbacks.append(Killed())

    command = ["coding", assets["base"], *EXACT, "--save-steps", "2", "--out", "runs/resumed"]
    monkeypatch.setattr(tloop.RunRequest, "__init__", killed)
    with pytest.raises(KeyboardInterrupt):
        train(*command)
    monkeypatch.setattr(tloop.RunRequest, "__init__", original)
    shutil.rmtree("runs/resumed")
    assert sitting("restore", "--from", "saved") == 0
    assert train(*command) == 0
    first, second = json.loads(Path("runs/resumed/receipt.json").read_text())["sittings"]
    assert (first["status"], first["from_step"], first["to_step"]) == ("interrupted", 0, 4)
    assert (second["status"], second["from_step"], second["to_step"]) == ("finished", 4, 6)
    resumed, straight = losses("runs/resumed"), losses("runs/straight")
    assert sorted(resumed) == sorted(straight) == [1, 2, 3, 4, 5, 6]
    for step, value in straight.items():
        assert abs(resumed[step] - value) < 1e-6, step


def test_a_warm_started_stage_carries_its_parent_across_sittings(work, assets, monkeypatch,
                                                                capsys):
    stop_at(monkeypatch, 1, run="general-a")
    command = ["general-a", assets["base"], "--sitting-minutes", "60"]
    assert train(*command) == tsitting.SITTING_EXIT  # coding finished, general-a stopped at 1
    assert Path("runs/coding/receipt.json").is_file()
    assert sitting("save", "--run", "runs/general-a", "--to", "keep/general-a") == 0
    saved = json.loads(Path("keep/general-a/manifest.json").read_text())
    assert saved["parent"]["run_dir"] == "runs/coding"
    assert "parent/receipt.json" in saved["files"]
    assert "parent/adapter/adapter_model.safetensors" in saved["files"]
    parts = saved["bytes_by_part"]  # --max-mb bounds the checkpoint, the parent comes on top
    assert parts["parent"] > 0 and parts["limited"] == parts["total"] - parts["parent"]
    shutil.rmtree("runs")
    stop_at(monkeypatch, None)
    assert sitting("restore", "--from", "keep/general-a") == 0
    assert "and the parent run runs/coding" in capsys.readouterr().out
    assert train(*command) == 0
    out = capsys.readouterr().out
    assert "coding has no finished run" not in out and "resuming general-a" in out
    receipt = json.loads(Path("runs/general-a/receipt.json").read_text())
    assert [s["to_step"] for s in receipt["sittings"]] == [1, 3]


def _stopped(assets, monkeypatch, step: int = 2, out: str = "runs/coding") -> None:
    stop_at(monkeypatch, step)
    assert train("coding", assets["base"], "--max-steps", "4", "--save-steps", "10", "--out", out,
                 "--sitting-minutes", "60") == tsitting.SITTING_EXIT


def test_restore_refuses_a_damaged_folder_and_writes_nothing(work, assets, monkeypatch, capsys):
    _stopped(assets, monkeypatch)
    assert sitting("save", "--run", "runs/coding", "--to", "saved") == 0
    shutil.rmtree("runs")
    with open("saved/checkpoint-2/optimizer.pt", "r+b") as fh:
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 1]))
    assert sitting("restore", "--from", "saved") == 2
    err = capsys.readouterr().err
    assert "does not verify, nothing restored" in err and "checkpoint-2/optimizer.pt has sha256" in err
    assert not Path("runs").exists()
    Path("saved/checkpoint-2/optimizer.pt").unlink()
    Path("saved/sittings.json").unlink()
    assert sitting("restore", "--from", "saved") == 2
    err = capsys.readouterr().err
    assert "checkpoint-2/optimizer.pt is missing" in err and "sittings.json is missing" in err
    assert not Path("runs").exists()


def test_save_refuses_above_the_size_limit_with_the_sizes(work, assets, monkeypatch, capsys):
    _stopped(assets, monkeypatch)
    plan = tsitting.plan_save(Path("runs/coding"))
    total = sum(p.stat().st_size for p in plan["files"].values())
    limit = total / 1e6 - 0.001
    assert sitting("save", "--run", "runs/coding", "--to", "saved", "--max-mb", f"{limit}") == 2
    err = capsys.readouterr().err
    assert f"would put {total / 1e6:.2f} MB in the tree, above --max-mb {limit:g}" in err
    assert "adapter " in err and "optimizer " in err
    assert "--lora-layers upper:N" in err and "--adapter-only" in err
    assert not Path("saved").exists()
    # the adapter alone fits; it cannot be restored as a resume point, and says why
    assert sitting("save", "--run", "runs/coding", "--to", "saved", "--max-mb", f"{limit}",
                   "--adapter-only") == 0
    saved = json.loads(Path("saved/manifest.json").read_text())
    assert saved["mode"] == "adapter-only" and "checkpoint-2/optimizer.pt" not in saved["files"]
    assert sitting("restore", "--from", "saved") == 2
    assert "--parent-run needs a finished run" in capsys.readouterr().err
    assert sitting("save", "--run", "runs/coding", "--to", "saved", "--max-mb", f"{total / 1e6 + 0.01}") == 0


def test_save_keeps_only_the_latest_checkpoint_and_refuses_foreign_folders(work, assets,
                                                                          monkeypatch, capsys):
    _stopped(assets, monkeypatch, step=1)
    assert sitting("save", "--run", "runs/coding", "--to", "saved") == 0
    assert sitting("restore", "--from", "saved") == 0  # the run is there already
    assert "already has checkpoint-1" in capsys.readouterr().out
    _stopped(assets, monkeypatch, step=3)  # the next sitting
    assert sitting("save", "--run", "runs/coding", "--to", "saved") == 0
    assert sorted(p.name for p in Path("saved").iterdir() if p.is_dir()) == ["checkpoint-3"]
    assert [s["to_step"] for s in json.loads(Path("saved/sittings.json").read_text())] == [1, 3]
    Path("receipts").mkdir(exist_ok=True)
    Path("receipts/other.json").write_text("{}")
    assert sitting("save", "--run", "runs/coding", "--to", "receipts") == 2
    assert "refuses a folder it did not write" in capsys.readouterr().err
    assert Path("receipts/other.json").is_file()
    # a finished run has nothing to resume
    stop_at(monkeypatch, None)
    assert train("coding", assets["base"], "--max-steps", "4", "--save-steps", "10",
                 "--out", "runs/coding", "--sitting-minutes", "60") == 0
    assert sitting("save", "--run", "runs/coding", "--to", "saved") == 2
    assert "is finished" in capsys.readouterr().err
