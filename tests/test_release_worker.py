"""A release says how its student must be run — the extraction form it was trained in and its
claim confidence gate — and its figures must come from running it so: the receipt's `worker`, the
Modelfile's note, `MemWorkerBackend.from_release`, and `export/verify.py`'s check of every
recorded evaluation (no model runs here)."""

from __future__ import annotations

import json

import pytest

from memworker.export import modelfile as mfile
from memworker.export.receipt import check_worker
from memworker.export.release import ExportError, export_release
from memworker.inference.gate import DEFAULT_SCORE
from memworker.inference.hmem import MemWorkerBackend, WorkerError, worker_config, worker_flags
from memworker.inference.schema import InputError

GATE = f"{DEFAULT_SCORE}>=-0.249"
TURNS = {"extract_form": "turns", "claim_gate": GATE}
PROPOSING = {**TURNS, "propose": True}


def test_worker_config_is_checked_and_normalised():
    assert worker_config() == mfile.DEFAULT_WORKER
    assert worker_config("turns", "-0.249") == TURNS
    assert worker_config("turns", "-0.249", propose=True) == PROPOSING
    for form, gate, why in (("lines", None, "extract form"),
                            ("walk", "-1", "window, turns and sentences"),
                            ("turns", "max(x)>=1", "unknown claim score")):
        with pytest.raises(WorkerError, match=why):
            worker_config(form, gate)
        # the export refuses it before reading anything, in its own error type
        with pytest.raises(ExportError, match=why):
            export_release("no-such-run", "no-such-release", extract_form=form, claim_gate=gate)
    # proposing needs a turns form and a gate to keep or drop what each turn proposes
    for form, gate in (("window", "-1"), ("turns", None)):
        with pytest.raises(WorkerError, match="propose needs extract form turns or sentences"):
            worker_config(form, gate, propose=True)


def test_worker_flags_run_a_release_worker_in_export_and_in_an_evaluation():
    """What export/rebuild.py and the main job pass on: every setting of the worker record."""
    gate = "first(predicate)+first(value)>=-0.055"
    worker = {"extract_form": "turns", "claim_gate": gate, "propose": True,
              "turn_history": "none", "event_stamps": "minute", "turn_quotes": "own"}
    tail = ["--turn-history", "none", "--event-stamps", "minute", "--turn-quotes", "own"]
    assert worker_flags(worker) == ["--extract-form", "turns", "--claim-gate", gate,
                                    "--propose", *tail]
    assert worker_flags(worker, "n1") == ["--extract-form", "turns", "--claim-gate",
                                          f"n1={gate}", "--propose", "n1", *tail]
    assert worker_flags({}) == ["--extract-form", "window"]
    assert worker_flags({"extract_form": "turns", "claim_layout": "v6"}, "s") == [
        "--extract-form", "turns", "--claim-layout", "v6"]
    with pytest.raises(WorkerError, match="claim layout 'v6' needs extract form"):
        worker_flags({"extract_form": "window", "claim_layout": "v6"})
    with pytest.raises(WorkerError, match="propose needs"):
        worker_flags({"extract_form": "window", "propose": True})


def test_the_modelfile_names_a_worker_that_is_not_the_default():
    kw = {"end_of_turn": "<|im_end|>", "license_text": "MIT"}
    plain = mfile.render("./m.gguf", **kw)
    noted = mfile.render("./m.gguf", worker=TURNS, **kw)
    assert mfile.worker_line(None) is None and mfile.worker_line(mfile.DEFAULT_WORKER) is None
    assert "memworker worker" not in plain
    line = mfile.worker_line(TURNS)
    assert line in noted.splitlines() and "extract form turns" in line and GATE in line
    assert "proposing" not in line and "propose=" not in line
    assert "; proposing (" in mfile.worker_line(PROPOSING)
    assert "propose=" in mfile.worker_line(PROPOSING)
    assert mfile.parse(noted) == mfile.parse(plain)   # a comment: Ollama's settings unchanged


def _release(tmp_path, worker, evaluated):
    """A release folder's receipt and Modelfile (no artifacts): `evaluated` maps a set to the
    (sampler, claim_gates) its student ran with."""
    folder = tmp_path / "release"
    folder.mkdir()
    (folder / "Modelfile").write_text(mfile.render("./s.gguf", end_of_turn="<|im_end|>",
                                                   license_text="MIT", worker=worker))
    receipt = {"student": {"gguf": "s.gguf"}, "evaluation": {
        name: {"config": {"arms": {"student": "s.gguf", "rules": "rules"}, "sampler": sampler,
                          **({"claim_gates": gates} if gates else {})}}
        for name, (sampler, gates) in evaluated.items()}}
    if worker is not None:
        receipt["worker"] = worker
    return folder, receipt


def test_verify_checks_that_each_evaluation_ran_the_student_as_shipped(tmp_path):
    shipped = ({"seed": 0, "extract_form": "turns"}, {"student": GATE})
    folder, receipt = _release(tmp_path, TURNS, {"heldout": shipped, "test": shipped})
    assert check_worker(folder, receipt) == []
    receipt["evaluation"]["test"]["config"]["claim_gates"] = {}          # ungated
    receipt["evaluation"]["heldout"]["config"]["sampler"].pop("extract_form")   # window
    problems = check_worker(folder, receipt)
    assert len(problems) == 2
    assert "evaluation heldout ran the student with extract form window" in problems[0]
    assert "evaluation test" in problems[1] and "claim gate none" in problems[1]
    (folder / "Modelfile").write_text(mfile.render("./s.gguf", end_of_turn="<|im_end|>",
                                                   license_text="MIT"))
    receipt["evaluation"] = {}
    assert check_worker(folder, receipt) == [
        f"{folder / 'Modelfile'}: does not name the release's worker "
        f"({mfile.worker_line(TURNS)[2:]})"]
    receipt["worker"] = {"extract_form": "turns", "claim_gate": "-0.249"}   # not normalised
    assert "not in its normal form" in check_worker(folder, receipt)[0]
    receipt["worker"] = {**TURNS, "propose": False}   # recorded only when proposing
    assert "not in its normal form" in check_worker(folder, receipt)[0]


def test_verify_checks_that_each_evaluation_proposed_as_the_release_ships(tmp_path):
    shipped = ({"seed": 0, "extract_form": "turns"}, {"student": GATE})
    folder, receipt = _release(tmp_path, PROPOSING, {"heldout": shipped, "test": shipped})
    receipt["evaluation"]["heldout"]["config"]["proposing"] = ["student"]
    problems = check_worker(folder, receipt)
    assert len(problems) == 1 and "evaluation test ran the student with extract form turns " \
        f"and claim gate {GATE}, but the release ships extract form turns and claim gate " \
        f"{GATE} and proposing" in problems[0]
    receipt["evaluation"]["test"]["config"]["proposing"] = ["base", "student"]
    assert check_worker(folder, receipt) == []
    # a release that does not propose refuses an evaluation whose student proposed
    (tmp_path / "greedy").mkdir()
    folder, receipt = _release(tmp_path / "greedy", TURNS, {"heldout": shipped})
    receipt["evaluation"]["heldout"]["config"]["proposing"] = ["student"]
    assert "claim gate " + GATE + " and proposing, but" in check_worker(folder, receipt)[0]


def test_a_receipt_without_a_worker_is_the_window_form_ungated(tmp_path):
    """Releases made before the record (no `worker` key, a Modelfile without a worker line, like
    receipts/v1): the worker is the window form, ungated, not proposing. Evaluations that ran the
    student so verify; one that ran it any other way is refused against that default."""
    window = ({"seed": 0}, {})                                       # extract_form absent: window
    explicit = ({"seed": 0, "extract_form": "window"}, {"base": GATE})   # a gate on another arm
    folder, receipt = _release(tmp_path, None, {"heldout": window, "test": explicit})
    assert "worker" not in receipt
    assert mfile.worker_line(None) is None
    assert check_worker(folder, receipt) == []
    receipt["worker"] = None                                         # the same as no key
    assert check_worker(folder, receipt) == []
    del receipt["worker"]
    where = folder / "release-receipt.json"
    for sampler, gates, proposing, ran in (
            ({"extract_form": "turns"}, {}, [], "extract form turns and claim gate none"),
            ({}, {"student": GATE}, [], f"extract form window and claim gate {GATE}"),
            ({"extract_form": "turns"}, {"student": GATE}, ["student"],
             f"extract form turns and claim gate {GATE} and proposing")):
        receipt["evaluation"]["natural"] = {"config": {
            "arms": {"student": "s.gguf"}, "sampler": sampler, "claim_gates": gates,
            "proposing": proposing}}
        assert check_worker(folder, receipt) == [
            f"{where}: evaluation natural ran the student with {ran}, but the release ships "
            "extract form window and claim gate none: its figures are not the shipped worker's"]


def test_from_release_runs_the_student_as_its_receipt_says(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(MemWorkerBackend, "from_gguf",
                        classmethod(lambda cls, path, **kw: seen.update(path=path, **kw)))
    folder, receipt = _release(tmp_path, TURNS, {})
    (folder / "release-receipt.json").write_text(json.dumps(receipt))
    MemWorkerBackend.from_release(folder, n_ctx=2048)
    assert seen == {"path": folder / "s.gguf", "n_ctx": 2048, **TURNS, "propose": False,
                    "turn_history": "answers", "event_stamps": "full", "turn_quotes": "upto",
                    "claim_layout": "v3", "with_rules": "none",
                    "reflect_rules": "none", "consolidate_rules": "none", "turn_gate": None,
                    "turn_gate_tail": "read"}
    receipt["worker"] = {**TURNS, "turn_gate": 0.4}
    (folder / "release-receipt.json").write_text(json.dumps(receipt))
    MemWorkerBackend.from_release(folder)
    assert seen["turn_gate"] == 0.4 and seen["turn_gate_tail"] == "read"
    with pytest.raises(InputError, match="from the receipt's worker"):
        MemWorkerBackend.from_release(folder, turn_gate=0.5)
    receipt["worker"] = {**TURNS, "turn_gate": 0.95, "turn_gate_tail": "drop"}
    (folder / "release-receipt.json").write_text(json.dumps(receipt))
    MemWorkerBackend.from_release(folder)
    assert seen["turn_gate_tail"] == "drop"
    with pytest.raises(InputError, match="from the receipt's worker"):
        MemWorkerBackend.from_release(folder, turn_gate_tail="read")
    receipt["worker"] = {**TURNS, "claim_layout": "v6"}
    (folder / "release-receipt.json").write_text(json.dumps(receipt))
    MemWorkerBackend.from_release(folder)
    assert seen["claim_layout"] == "v6"
    with pytest.raises(InputError, match="from the receipt's worker"):
        MemWorkerBackend.from_release(folder, claim_layout="v3")
    receipt.pop("worker")
    (folder / "release-receipt.json").write_text(json.dumps(receipt))
    MemWorkerBackend.from_release(folder)
    assert seen["extract_form"] == "window" and seen["claim_gate"] is None
    with pytest.raises(InputError, match="from the receipt's worker"):
        MemWorkerBackend.from_release(folder, claim_gate="-1")
    with pytest.raises(InputError, match="from the receipt's worker"):
        MemWorkerBackend.from_release(folder, propose=True)
    receipt["worker"] = PROPOSING
    (folder / "release-receipt.json").write_text(json.dumps(receipt))
    MemWorkerBackend.from_release(folder)
    assert seen["propose"] is True and seen["claim_gate"] == GATE
    receipt["worker"] = {**PROPOSING, "turn_history": "none"}   # the window read once
    (folder / "release-receipt.json").write_text(json.dumps(receipt))
    MemWorkerBackend.from_release(folder)
    assert seen["turn_history"] == "none" and seen["propose"] is True
    with pytest.raises(InputError, match="from the receipt's worker"):
        MemWorkerBackend.from_release(folder, turn_history="answers")
    receipt["worker"] = {**PROPOSING, "with_rules": "union"}   # the hybrid worker
    (folder / "release-receipt.json").write_text(json.dumps(receipt))
    MemWorkerBackend.from_release(folder)
    assert seen["with_rules"] == "union"
    with pytest.raises(InputError, match="from the receipt's worker"):
        MemWorkerBackend.from_release(folder, with_rules="none")
    with pytest.raises(InputError, match="not a release receipt"):
        MemWorkerBackend.from_release(tmp_path)


def test_the_worker_proposes_in_every_turn_only_with_a_turns_form_and_a_gate():
    """MemWorkerBackend(propose=True): each turn's grammar asks for at least one claim (the
    schema, and so what the codec accepts, is unchanged), and the gate keeps or drops them."""
    from memworker.inference.backends import ReplayBackend
    from tests.test_codec import EP

    for kw in ({"extract_form": "window", "claim_gate": GATE}, {"extract_form": "turns"}):
        with pytest.raises(InputError, match="propose needs extract form turns or sentences"):
            MemWorkerBackend(ReplayBackend([]), propose=True, **kw)
    # the store's worker is checked by the export's own check (`worker_config`)
    with pytest.raises(InputError, match="extract form 'lines'"):
        MemWorkerBackend(ReplayBackend([]), extract_form="lines")
    with pytest.raises(InputError, match="window, turns and sentences"):
        MemWorkerBackend(ReplayBackend([]), extract_form="walk", claim_gate=GATE)
    calls = {}
    for propose in (False, True):
        backend = ReplayBackend(['{"claims":[]}'] * 2)
        worker = MemWorkerBackend(backend, extract_form="turns", claim_gate=None if not propose
                                  else GATE, propose=propose)
        worker.claim_gate = None   # (ReplayBackend returns no log-probabilities to score)
        worker._run("extract", EP)
        calls[propose] = backend.calls
    assert [c["schema"] for c in calls[False]] == [c["schema"] for c in calls[True]]
    assert all(a["grammar"] != b["grammar"] for a, b in zip(calls[False], calls[True],
                                                          strict=True))


def _replay_case(tmp_path, corpus, recorded: list[str], sha: str = "ab" * 32):
    """A release receipt whose student hashes to `sha`, and an evaluation folder of the heldout
    set whose student recorded `recorded` (one answer per extract window, the window form; a None
    answer is a window the evaluation recorded as failed)."""
    from memworker.eval.runner import load_eval_rows

    rows = [r for r in load_eval_rows(corpus, "heldout") if r["task"] == "extract"]
    assert len(rows) >= len(recorded)
    folder = tmp_path / "release"
    folder.mkdir(exist_ok=True)
    receipt = {"student": {"gguf": "s.gguf"}, "artifacts": {"s.gguf": {"sha256": "ab" * 32}}}
    evaluation = tmp_path / "eval-heldout"
    evaluation.mkdir(exist_ok=True)
    (evaluation / "config.json").write_text(json.dumps(
        {"set": "heldout", "gguf": {"student": {"path": "release/s.gguf", "sha256": sha}}}))
    with open(evaluation / "samples.jsonl", "w") as out:
        for row, raw in zip(rows, recorded, strict=False):
            failed = raw is None
            out.write(json.dumps({"arm": "student", "task": "extract", "id": row["id"],
                                  "error": "invalid" if failed else None, "turns": None,
                                  "attempts": [{"raw": raw or "{"}]}) + "\n")
            out.write(json.dumps({"arm": "rules", "task": "extract", "id": row["id"],
                                  "error": None, "attempts": [{"raw": "x"}]}) + "\n")
    return folder, receipt, evaluation


def test_verify_replay_checks_the_worker_writes_what_the_evaluation_recorded(tmp_path,
                                                                             tiny_corpus):
    """`export/verify.py --replay N`: the store's worker, made from the release folder, answers
    the first N extract windows the evaluation's student answered, and each answer must be the
    recorded one byte for byte; failed windows are skipped, a differing answer or another GGUF is
    named."""
    from memworker.export.verify import check_replay
    from memworker.inference.backends import ReplayBackend

    empty, spaced = '{"claims":[]}', '{"claims": []}'   # both valid, different bytes
    made = []

    def worker(outputs):
        def make(folder, **kwargs):
            made.append((folder, kwargs))
            return MemWorkerBackend(ReplayBackend(outputs))
        return make

    folder, receipt, evaluation = _replay_case(tmp_path, tiny_corpus, [empty, None, empty])
    ok = check_replay(folder, receipt, evaluation, tiny_corpus, 2, threads=1,
                      make_worker=worker([empty, empty]))
    assert ok == [] and made == [(folder, {"n_threads": 1})]
    # the failed window is skipped: the worker answered the 1st and the 3rd
    problems = check_replay(folder, receipt, evaluation, tiny_corpus, 2,
                            make_worker=worker([empty, spaced]))
    assert len(problems) == 1 and "another answer than the evaluation recorded" in problems[0]
    assert "turn 0 of 1" in problems[0] and spaced in problems[0]
    assert "fewer than 3" in check_replay(folder, receipt, evaluation, tiny_corpus, 3,
                                          make_worker=worker([]))[0]
    # a worker that fails is a difference too
    assert "the worker failed" in check_replay(folder, receipt, evaluation, tiny_corpus, 1,
                                               make_worker=worker(["{"] * 2))[0]
    # an evaluation of other bytes is refused before anything runs
    folder, receipt, evaluation = _replay_case(tmp_path, tiny_corpus, [empty], sha="cd" * 32)
    problems = check_replay(folder, receipt, evaluation, tiny_corpus, 1,
                            make_worker=worker([]))
    assert len(problems) == 1 and "not this release's student" in problems[0]


def test_a_worker_that_reads_each_turn_once_is_recorded_and_checked(tmp_path):
    """`turn_history="none"` (a student trained read once): the worker records it, the Modelfile
    names it, and an evaluation that asked the student with the earlier answers is not the
    shipped worker's (nor the reverse)."""
    once = {**PROPOSING, "turn_history": "none"}
    assert worker_config("turns", "-0.249", True, "none") == once
    line = mfile.worker_line(once)
    assert "turns read once" in line and "turn_history=" in line
    assert "read once" not in mfile.worker_line(PROPOSING)
    with pytest.raises(ExportError, match="needs extract form"):
        export_release("no-such-run", "no-such-release", turn_history="none")
    read_once = ({"seed": 0, "extract_form": "turns", "turn_history": "none"}, {"student": GATE})
    today = ({"seed": 0, "extract_form": "turns"}, {"student": GATE})
    folder, receipt = _release(tmp_path, once, {"heldout": read_once, "test": today})
    for name in ("heldout", "test"):
        receipt["evaluation"][name]["config"]["proposing"] = ["student"]
    problems = check_worker(folder, receipt)
    assert len(problems) == 1 and "evaluation test ran the student with extract form turns and " \
        f"claim gate {GATE} and proposing, but the release ships extract form turns and claim " \
        f"gate {GATE} and proposing and turns read once" in problems[0]
