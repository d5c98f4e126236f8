"""The report notebook: built from receipts, executed headless (a real ipykernel through nbclient),
the same file when rebuilt from the same inputs, and each section "not available" without its
input."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("nbclient", reason="pip install -e '.[report]'")
pytest.importorskip("ipykernel", reason="pip install -e '.[report]'")

from memworker import report as R  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).parent / "fixtures" / "locomo_small.json"


def _outputs(nb_path: Path) -> list[list[dict]]:
    nb = json.loads(nb_path.read_text())
    return [c["outputs"] for c in nb["cells"] if c["cell_type"] == "code"]


def _text(outputs: list[dict]) -> str:
    return "\n".join("".join(o.get("data", {}).get("text/markdown", ""))
                     + "".join(o.get("text", "")) for o in outputs)


def _images(outputs: list[dict]) -> int:
    return sum("image/png" in o.get("data", {}) for o in outputs)


def test_notebook_from_the_committed_receipts_executes_and_rebuilds_identically(tmp_path):
    none = tmp_path / "absent"
    argv = ["--receipts", str(REPO / "receipts"), "--data", str(none), "--runs", str(none)]
    assert R.main([*argv, "--out", str(tmp_path / "a.ipynb")]) == 0
    assert R.main([*argv, "--out", str(tmp_path / "b.ipynb")]) == 0
    a, b = (tmp_path / "a.ipynb").read_bytes(), (tmp_path / "b.ipynb").read_bytes()
    assert a == b, "rebuilding from the same receipts changed the notebook"
    nb = json.loads(a)
    assert [c["id"] for c in nb["cells"]] == [f"cell-{n:02d}" for n in range(len(nb["cells"]))]
    assert all("execution" not in c["metadata"] for c in nb["cells"])
    outs = _outputs(tmp_path / "a.ipynb")
    assert all(outs), "a code cell has no output"
    assert not any(o["output_type"] == "error" for cell in outs for o in cell)
    setup, coverage, losses, tasks, temporal, live, external = outs
    assert "release-receipt.json" in _text(setup)
    assert "stage receipts" in _text(coverage) and _images(coverage) == 1
    release = json.loads((REPO / "receipts" / "release-receipt.json").read_text())
    for stage in release["lineage"]:  # every stage of the released student's chain is shown
        assert f"| {stage['stage']} |" in _text(losses), stage["stage"]
    assert "endpoints" in _text(losses)
    if release.get("evaluation"):
        for set_name in release["evaluation"]:
            assert f"Set `{set_name}`" in _text(tasks) and f"Set `{set_name}`" in _text(temporal)
        assert _images(tasks) == len(release["evaluation"])
    else:  # exported, not yet evaluated: both sections say so and draw nothing
        for section in (tasks, temporal):
            assert "Not available:" in _text(section) and "no evaluation section" in _text(section)
            assert _images(section) == 0
    live_path = REPO / "receipts" / "live-summary.json"
    if live_path.is_file():
        live_summary = json.loads(live_path.read_text())
        for arm, result in live_summary["arms"].items():  # the committed live table is shown
            assert f"**{result['passed']}/{result['total']}** scenarios" in _text(live), arm
    else:  # the committed release has no live run yet
        assert "Not available:" in _text(live)
    assert "Not available:" in _text(external) and "external-summary.json" in _text(external)


def _live_summary() -> dict:
    def scenario(ok: bool) -> dict:
        return {"passed": ok, "checks": {"current_value": True, "no_secret": ok},
                "isolated": {"passed": 2, "total": 3}}
    return {"scenarios": ["correction", "secret"],
            "arms": {"rules": {"passed": 1, "total": 2, "isolated": {"passed": 4, "total": 6},
                               "scenarios": {"correction": scenario(True),
                                             "secret": scenario(False)}}}}


def test_every_section_with_its_input(tmp_path):
    receipts = tmp_path / "receipts"
    shutil.copytree(REPO / "receipts", receipts)
    (receipts / "live-summary.json").write_text(json.dumps(_live_summary()))
    from memworker.eval.studies import external

    assert external.main(["--locomo", str(FIXTURE), "--arm", "rules", "--window", "4",
                          "--questions", "-1", "--out", str(tmp_path / "ext"), "--no-progress",
                          "--resamples", "100"]) == 0
    shutil.copy(tmp_path / "ext" / "summary.json", receipts / "external-summary.json")
    # a training log whose sha256 is the receipt's: per-step curves for that stage
    runs = tmp_path / "runs"
    name = json.loads((receipts / "release-receipt.json").read_text())["lineage"][-1]["stage"]
    stage = json.loads((receipts / f"{name}-receipt.json").read_text())
    state = {"log_history": [{"step": 1, "loss": 0.9}, {"step": 2, "loss": 0.7},
                             {"step": 2, "eval_loss": 0.8}]}
    (runs / stage["stage"]).mkdir(parents=True)
    path = runs / stage["stage"] / "trainer_state.json"
    path.write_text(json.dumps(state))
    stage["trainer_state_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (receipts / f"{name}-receipt.json").write_text(json.dumps(stage))
    assert R.main(["--receipts", str(receipts), "--data", str(tmp_path / "none"), "--runs",
                   str(runs), "--out", str(tmp_path / "r.ipynb")]) == 0
    setup, coverage, losses, tasks, temporal, live, external_out = _outputs(tmp_path / "r.ipynb")
    assert "trainer_state.json (sha256 = receipt's trainer_state_sha256)" in _text(losses)
    assert _images(losses) == 1
    assert "| secret | FAIL (no_secret) | 2/3 |" in _text(live)
    assert "**1/2** scenarios" in _text(live)
    text = _text(external_out)
    assert "not LoCoMo QA accuracy" in text and "License declared by the file: CC0-1.0" in text
    assert "extract_support" in text and "reflect_correct" in text
    assert "| 5 | 1/1 |" in text and "by QA category" in text


def test_loss_sources(tmp_path):
    receipts, runs = tmp_path / "receipts", tmp_path / "runs"
    receipts.mkdir()
    base = {"result": {"global_step": 2, "mean_train_loss": 1.0, "final_train_loss": 0.5,
                       "val_loss": 0.6}}
    (receipts / "b-receipt.json").write_text(json.dumps(
        {**base, "stage": "b", "parent": {"stage": "a"}, "log_history": [
            {"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}, {"step": 2, "eval_loss": 0.6}]}))
    (receipts / "a-receipt.json").write_text(json.dumps(
        {**base, "stage": "a", "parent": None, "trainer_state_sha256": "0" * 64}))
    (runs / "a").mkdir(parents=True)
    (runs / "a" / "trainer_state.json").write_text('{"log_history": [{"step": 1, "loss": 3}]}')
    stages, why = R.Inputs(receipts, tmp_path / "none", runs).losses()
    assert why is None and [s["stage"] for s in stages] == ["a", "b"]   # lineage order
    a, b = stages
    assert "train" not in a and "endpoints only" in a["source"]   # sha256 differs: not used
    assert b["source"] == "receipt" and b["train"] == [(1, 1.0), (2, 0.5)]
    assert b["val"] == [(2, 0.6)]
    empty = tmp_path / "empty"
    empty.mkdir()
    inputs = R.Inputs(empty, empty / "d", empty / "r")
    for section in ("coverage", "losses", "evaluations", "live", "external"):
        value, why = getattr(inputs, section)()
        assert value is None and why


def test_cli_errors(tmp_path, capsys):
    assert R.main(["--receipts", str(tmp_path / "nope"), "--out", str(tmp_path / "x")]) == 2
    assert "no receipts folder" in capsys.readouterr().err


def test_strip_volatile():
    from nbformat.v4 import new_output

    nb = R.build_notebook()
    cell = nb.cells[1]
    cell["id"] = "random-id"
    cell.metadata["execution"] = {"iopub.execute_input": "2026-01-01T00:00:00Z"}
    cell["outputs"] = [new_output("stream", name="stderr", text="Matplotlib is building the "
                                  "font cache; this may take a moment.\n"),
                       new_output("stream", name="stdout", text="kept\n")]
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.7"}
    out = R.strip_volatile(nb)
    assert out.cells[1]["id"] == "cell-01" and "execution" not in out.cells[1].metadata
    assert [o["name"] for o in out.cells[1]["outputs"]] == ["stdout"]
    assert out.metadata["language_info"] == {"name": "python"}
