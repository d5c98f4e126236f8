"""External diagnostic on a LoCoMo-format file: loader, windows, QA rows, grading, and the rules
arm end to end through the codec (tests/fixtures/locomo_small.json, written for these tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memworker.contracts import validate_input
from memworker.eval import runner
from memworker.eval.studies import external as X

FIXTURE = Path(__file__).parent / "fixtures" / "locomo_small.json"


@pytest.fixture()
def data():
    return X.load_locomo(FIXTURE)


def _write(tmp_path: Path, doc) -> Path:
    p = tmp_path / "bad.json"
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc), "utf-8")
    return p


def _good_sample() -> dict:
    return json.loads(FIXTURE.read_text())["samples"][1]


# --- loading ------------------------------------------------------------------------------------

def test_loader_reads_both_observation_layouts_and_the_license(data):
    assert data.license.startswith("CC0-1.0")
    assert data.counts() == {"samples": 2, "sessions": 3, "turns": 15, "observations": 8,
                             "qa": 6}
    a, b = data.samples
    assert a.speakers == ("Maren", "Tobias")
    # published layout: observation.session_N_observation; list-valued evidence kept whole
    assert a.observations[2]["Maren"] == [("Maren adopted a dog named Pico.", ["D2:2", "D2:4"])]
    # alternative layout: session_N_observation on the sample itself
    assert [f for f, _ in b.observations[1]["Ade"]][0].startswith("Ade plays the violin")
    assert a.timestamps == {1: "2023-05-08T13:56:00Z", 2: "2023-06-27T10:37:00Z"}
    assert a.sessions[2][0].timestamp == "2023-06-27T10:37:00Z"


def test_a_bare_list_without_license_is_accepted(tmp_path):
    p = _write(tmp_path, [_good_sample()])
    loaded = X.load_locomo(p)
    assert loaded.license is None and loaded.counts()["samples"] == 1
    assert "declares no license" in X.license_line(loaded.license)


@pytest.mark.parametrize("text,expected", [
    ("1:56 pm on 8 May, 2023", "2023-05-08T13:56:00Z"),
    ("10:37 am on 27 June, 2023", "2023-06-27T10:37:00Z"),
    ("12:05 am on 1 Jan, 2024", "2024-01-01T00:05:00Z"),
    ("12:30 pm on 3 Sept, 2022", "2022-09-03T12:30:00Z"),
    ("8 May, 2023", "2023-05-08T00:00:00Z"),
    ("2023-05-08T13:56:00+02:00", "2023-05-08T13:56:00+02:00"),
])
def test_session_time(text, expected):
    assert X.parse_session_time(text, "here") == expected


@pytest.mark.parametrize("text", ["yesterday", "13:56 pm on 8 May, 2023",
                                  "1:56 pm on 31 February, 2023", "", None])
def test_session_time_errors(text):
    with pytest.raises(X.LocomoError, match="session time"):
        X.parse_session_time(text, "sample 0")


def _mutated(change) -> list:
    sample = _good_sample()
    change(sample)
    return [sample]


@pytest.mark.parametrize("doc,message", [
    ("{not json", r"not JSON \(line 1"),
    ('"text"', "expected a JSON list of samples, got str"),
    ("[]", "holds no samples"),
    ('{"rows": []}', "'samples' list"),
    ([1], r"sample 0: expected an object"),
    ([{"qa": []}], r"missing 'conversation'"),
    (_mutated(lambda s: s["conversation"].pop("speaker_b")), "two different names"),
    (_mutated(lambda s: s["conversation"].pop("session_1_date_time")), "missing session time"),
    (_mutated(lambda s: s["conversation"].update(session_1_date_time="soon")),
     "cannot read the session time 'soon'"),
    (_mutated(lambda s: s["conversation"]["session_1"][0].pop("dia_id")),
     r"session_1\[0\]: missing string field 'dia_id'"),
    (_mutated(lambda s: s["conversation"]["session_1"][0].update(speaker="Zed")),
     "speaker 'Zed' is neither"),
    (_mutated(lambda s: s["conversation"]["session_1"][1].update(dia_id="D1:1")),
     "dia_id 'D1:1' repeats"),
    (_mutated(lambda s: s["conversation"].update(session_1="x")), "must be a list of turns"),
    (_mutated(lambda s: s["conversation"].update(session_1=[])), "no session_N turn lists"),
    (_mutated(lambda s: s.update(session_1_observation={"Ade": "x"})),
     r"session_1_observation.Ade must be a list"),
    (_mutated(lambda s: s.update(session_1_observation={"Ade": [["only fact"]]})),
     r"must be \[fact, dia_id\]"),
    (_mutated(lambda s: s.update(qa={"question": "?"})), "'qa' must be a list"),
    (_mutated(lambda s: s.update(qa=[{"answer": "x"}])), r"qa\[0\] must be an object with"),
])
def test_malformed_files_give_one_line_errors(tmp_path, doc, message):
    p = _write(tmp_path, doc)
    with pytest.raises(X.LocomoError, match=message) as err:
        X.load_locomo(p)
    assert "\n" not in str(err.value)


def test_missing_file_and_cli_error_line(tmp_path, capsys):
    with pytest.raises(X.LocomoError, match="LoCoMo file not found"):
        X.load_locomo(tmp_path / "nope.json")
    p = _write(tmp_path, "[1]")
    assert X.main(["--locomo", str(p), "--arm", "rules", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("external: error: sample 0: expected an object")


def test_dia_ids():
    assert X.split_dia_ids("D8:6; D9:17") == ["D8:6", "D9:17"]
    assert X.split_dia_ids(["D1:03", "D2:1,D2:2"]) == ["D1:3", "D2:1", "D2:2"]
    assert X.split_dia_ids(None) == []
    assert X.evidence_id("D1:3") == "D1_3" and X.evidence_id("3:4") == "T3_4"


# --- rows ---------------------------------------------------------------------------------------

def test_windows_are_seeded_contract_valid_and_focal(data):
    rows = X.build_windows(data, 4, 10, seed=0)
    assert [r["id"] for r in rows] == ["conv-a-s1-t0-w4-extract", "conv-a-s1-t4-w2-extract",
                                       "conv-a-s2-t0-w4-extract", "conv-b-s1-t0-w4-extract",
                                       "conv-b-s1-t4-w1-extract"]
    for r in rows:
        validate_input("extract", r["input"])
        assert r["episode"] == r["locomo"]["sample_id"]
    by_id = {r["id"]: r for r in rows}
    w = by_id["conv-a-s2-t0-w4-extract"]
    # 2 turns each; Maren wrote more, so she is the user; her observation cites D2:2 and D2:4
    assert w["locomo"]["focal"] == "Maren"
    assert [e["role"] for e in w["input"]["events"]] == ["assistant", "user", "assistant", "user"]
    assert {e["timestamp"] for e in w["input"]["events"]} == {"2023-06-27T10:37:00Z"}
    assert w["locomo"]["observations"] == [{"fact": "Maren adopted a dog named Pico.",
                                            "dia_ids": ["D2:2", "D2:4"]}]
    assert by_id["conv-b-s1-t4-w1-extract"]["locomo"]["observations"] == []
    two = X.build_windows(data, 4, 2, seed=0)
    assert [r["id"] for r in two] == [r["id"] for r in X.build_windows(data, 4, 2, seed=0)]
    assert len(two) == 2
    seeds = {tuple(r["id"] for r in X.build_windows(data, 4, 2, seed=s)) for s in range(6)}
    assert len(seeds) > 1
    with pytest.raises(X.LocomoError, match="--window must be between 1 and 40"):
        X.build_windows(data, 41, 1, seed=0)


def test_questions(data):
    rows = X.build_questions(data, None, seed=0)
    assert [r["id"] for r in rows] == ["conv-a-q0-reflect", "conv-a-q1-reflect",
                                       "conv-a-q2-reflect", "conv-a-q3-reflect",
                                       "conv-b-q0-reflect"]
    assert data.notes["qa_evidence_not_in_conversation"] == 1    # D9:9 is not in conv-a
    by_id = {r["id"]: r for r in rows}
    assert by_id["conv-a-q1-reflect"]["locomo"]["gold_citations"] == ["D1_3"]  # D1:03
    assert by_id["conv-a-q2-reflect"]["locomo"]["gold_citations"] == ["D2_2", "D2_4"]
    adv = by_id["conv-a-q3-reflect"]
    assert adv["locomo"]["answerable"] is False and adv["locomo"]["answer"] is None
    for r in rows:
        validate_input("reflect", r["input"])
        assert r["input"]["asked_at"] == ("2023-06-27T10:37:00Z" if r["episode"] == "conv-a"
                                          else "2024-03-02T21:05:00Z")
    q0 = by_id["conv-a-q0-reflect"]["input"]["evidence"]
    assert q0 == [{"id": "D1_1", "timestamp": "2023-05-08T13:56:00Z",
                   "text": "Maren: Hi Tobias! Big news: I moved to Lisbon last month."}]
    with_distractors = X.build_questions(X.load_locomo(FIXTURE), 2, seed=3, distractors=2)
    assert len(with_distractors) == 2
    assert all(r["id"].endswith("-d2-s3-reflect") for r in with_distractors)
    for r in with_distractors:
        ids = [e["id"] for e in r["input"]["evidence"]]
        assert len(ids) == len(r["locomo"]["gold_citations"]) + 2 and len(set(ids)) == len(ids)


# --- grading ------------------------------------------------------------------------------------

def _claim(idx, value, statement="s", subject="the user"):
    return {"source_indices": idx, "quotes": ["q"] * len(idx), "subject": {"name": subject,
            "type": "person"}, "predicate": "p", "value": value, "statement": statement}


def test_grade_window(data):
    row = next(r for r in X.build_windows(data, 4, 10, 0) if r["id"] == "conv-a-s2-t0-w4-extract")
    out = {"claims": [_claim([1], "a dog named Pico"),       # cites D2:2 (observed), matches
                      _claim([0], "weekend"),                # cites D2:1: no observation
                      _claim([2], None, "Ilse has two cats")]}
    v = X.grade_window(row, "first_try", out)
    assert v["metrics"]["extract_support"] == [1, 3]
    assert v["metrics"]["extract_turn_coverage"] == [1, 2]    # D2:2 of {D2:2, D2:4}
    assert v["metrics"]["extract_content_coverage"] == [1, 1]
    assert "extract_empty" not in v["metrics"]
    failed = X.grade_window(row, "failed", None)["metrics"]
    assert failed["extract_support"] == [0, 1] and failed["extract_content_coverage"] == [0, 1]
    quiet = next(r for r in X.build_windows(data, 4, 10, 0) if r["id"] == "conv-b-s1-t4-w1-extract")
    assert X.grade_window(quiet, "first_try", {"claims": []})["metrics"] == {
        "extract_support": [0, 0], "extract_empty": [1, 1]}
    assert X.grade_window(quiet, "first_try", {"claims": [_claim([0], "x")]})["metrics"][
        "extract_empty"] == [0, 1]


def test_claim_matches_observation():
    fact = "Maren adopted a dog named Pico."
    assert X.claim_matches_observation(_claim([0], "dogs named Pico"), fact)
    assert not X.claim_matches_observation(_claim([0], "a cat named Pico"), fact)
    assert X.claim_matches_observation(_claim([0], None, "Maren adopted a dog", "Maren"), fact)
    assert not X.claim_matches_observation(_claim([0], None, "Maren adopted", "Maren"), fact)


def test_grade_question(data):
    rows = {r["id"]: r for r in X.build_questions(data, None, 0)}
    q = rows["conv-a-q2-reflect"]
    ok = {"answer": "The dog is called Pico.", "citations": ["D2_2"],
          "insufficient_evidence": False}
    assert X.grade_question(q, "first_try", ok)["metrics"] == {
        "reflect_correct": [1, 1], "reflect_abstention": [1, 1], "reflect_answer": [1, 1],
        "reflect_citations": [1, 1]}
    wrong_cite = {**ok, "citations": ["D1_1"]}
    m = X.grade_question(q, "first_try", wrong_cite)["metrics"]
    assert m["reflect_correct"] == [0, 1] and m["reflect_citations"] == [0, 1]
    assert m["reflect_answer"] == [1, 1]
    adv = rows["conv-a-q3-reflect"]
    abstain = {"answer": "Not said.", "citations": [], "insufficient_evidence": True}
    assert X.grade_question(adv, "first_try", abstain)["metrics"] == {
        "reflect_correct": [1, 1], "reflect_abstention": [1, 1]}
    answered = {"answer": "pottery", "citations": ["D1_4"], "insufficient_evidence": False}
    assert X.grade_question(adv, "first_try", answered)["metrics"]["reflect_correct"] == [0, 1]
    assert X.grade_question(q, "failed", None)["metrics"]["reflect_correct"] == [0, 1]


# --- end to end ---------------------------------------------------------------------------------

def test_rules_arm_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["--locomo", str(FIXTURE), "--arm", "rules", "--window", "4", "--windows", "10",
            "--questions", "-1", "--out", str(out), "--no-progress", "--resamples", "200"]
    assert X.main(argv) == 0
    assert "not LoCoMo QA accuracy" in capsys.readouterr().out
    samples = runner.read_samples(out / runner.SAMPLES)
    assert len(samples) == 10 and {s["arm"] for s in samples} == {"rules"}
    for s in samples:     # the codec ran (prompt hashed, schema checked) and the grade is ours
        assert s["prompt_sha256"] and s["status"] == "first_try" and s["output"] is not None
        assert set(s["verdicts"]["metrics"]) >= {"schema_accepted"}
        assert any(m.startswith(s["task"]) for m in s["verdicts"]["metrics"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kind"] == "memworker-external-diagnostic"
    assert summary["license"].startswith("CC0-1.0")
    assert summary["config"]["file"]["notes"] == {"qa_evidence_not_in_conversation": 1}
    assert summary["rows_per_task"] == {"extract": 5, "reflect": 5}
    ext = summary["metrics"]["rules"]["extract"]["metrics"]
    rebuilt = X.summarise(X.build_windows(X.load_locomo(FIXTURE), 4, 10, 0)
                          + X.build_questions(X.load_locomo(FIXTURE), None, 0),
                          samples, ["rules"], config=summary["config"], resamples=200)
    assert rebuilt["metrics"] == summary["metrics"]
    for name in ("extract_support", "extract_turn_coverage", "extract_content_coverage"):
        e = ext[name]
        assert e["den"] > 0 and e["value"] == e["num"] / e["den"]
        assert e["ci"][0] <= e["value"] <= e["ci"][1]
    refl = summary["metrics"]["rules"]["reflect"]["metrics"]["reflect_correct"]
    assert refl["n_rows"] == 5
    cats = summary["reflect_by_category"]["rules"]
    assert sum(c["rows"] for c in cats.values()) == 5 and set(cats) == {"1", "4", "5"}
    report = (out / "report.md").read_text()
    assert "not LoCoMo QA accuracy" in report and "License declared by the file" in report
    # rerun resumes: nothing runs again, same summary
    assert X.main(argv) == 0
    assert len(runner.read_samples(out / runner.SAMPLES)) == 10
    assert json.loads((out / "summary.json").read_text())["metrics"] == summary["metrics"]


@pytest.mark.slow
def test_embedded_base_arm_on_one_window_and_one_question(tmp_path, embedded_gguf):
    out = tmp_path / "run"
    assert X.main(["--locomo", str(FIXTURE), "--arm", f"base={embedded_gguf}", "--arm", "rules",
                   "--window", "4", "--windows", "1", "--questions", "1", "--out", str(out),
                   "--n-ctx", "2048", "--threads", "2", "--max-tokens", "128",
                   "--no-progress", "--resamples", "100"]) == 0
    samples = [s for s in runner.read_samples(out / runner.SAMPLES) if s["arm"] == "base"]
    assert sorted(s["task"] for s in samples) == ["extract", "reflect"]
    for s in samples:
        assert s["attempts"] and (s["status"] == "failed") == (s["output"] is None)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["gguf"]["base"]["sha256"]
    assert summary["comparisons"][0]["label"] == "rules - base"


# --- the worker as the store runs it (issue 46) -------------------------------------------------

def _fake_release(tmp_path, worker):
    import hashlib

    folder = tmp_path / "release"
    folder.mkdir()
    gguf = folder / "student-q8_0.gguf"
    gguf.write_bytes(b"GGUF fake student")
    receipt = {"student": {"gguf": gguf.name},
               "artifacts": {gguf.name: {"sha256": hashlib.sha256(gguf.read_bytes())
                                         .hexdigest()}},
               "worker": worker}
    (folder / "release-receipt.json").write_text(json.dumps(receipt))
    return folder, gguf


def test_release_worker_runs_the_student_as_the_store_does(tmp_path):
    from memworker.eval import runner
    from memworker.eval.studies import external

    folder, gguf = _fake_release(tmp_path, {"extract_form": "turns", "propose": True,
                                            "claim_gate": "first(predicate)+first(value)>=-0.055"})
    arms = [runner.parse_arm(f"me={gguf}"), runner.parse_arm("rules")]
    form, gates, proposing = external.release_worker(folder, arms)
    assert form == "turns" and proposing == ["me"]
    assert gates == ["me=first(predicate)+first(value)>=-0.055"]
    gated = runner.assign_proposals(runner.assign_gates(arms, gates, form), proposing, form)
    assert gated[0].claim_gate is not None and gated[0].propose and not gated[1].propose


def test_release_worker_needs_an_arm_holding_the_student(tmp_path):
    from memworker.eval import runner
    from memworker.eval.runner import EvalError
    from memworker.eval.studies import external

    folder, _ = _fake_release(tmp_path, {"extract_form": "window"})
    other = tmp_path / "other.gguf"
    other.write_bytes(b"another model")
    with pytest.raises(EvalError, match="no arm is its student"):
        external.release_worker(folder, [runner.parse_arm(f"x={other}")])
    with pytest.raises(EvalError, match="no readable release-receipt.json"):
        external.release_worker(tmp_path / "nowhere", [])
