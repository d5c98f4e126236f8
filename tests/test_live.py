"""Live acceptance: the hmem-shaped reference store, the scripted scenarios and eval/live.py.

Store unit tests drive `MemWorkerBackend` with `ReplayBackend` (the backend-protocol test double
that returns given texts; the real codec decodes them) and with the deterministic rules
baseline. The slow test runs the embedded base GGUF through llama.cpp end to end."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from memworker.eval.live import checks as C
from memworker.eval.live.cli import main
from memworker.eval.live.runner import RecordingWorker, identity, play
from memworker.eval.live.scenarios import (
    CHECK_NAMES,
    ScenarioError,
    fact_matches,
    load_scenarios,
)
from memworker.eval.live.store import LiveStore
from memworker.inference.backends import BackendError, Generation, ReplayBackend
from memworker.inference.codec import (
    OutputParseError,
    OutputTruncatedError,
    OutputValidationError,
)
from memworker.inference.hmem import MemWorkerBackend
from memworker.inference.rules import RulesBackend
from memworker.wire import dump_answer
from tests.test_wire import wire_claim

S1 = [{"role": "user", "content": "I live in Porto."}]
S2 = [{"role": "user", "content": "I moved to Lisbon last month."}]
T1, T2 = "2024-09-12T18:00:00+01:00", "2025-03-02T11:30:00+00:00"
SECRET = "sk-test-4eC39HqLyjWDarjtT1zdp7dc"


def claim(quote, value, *, supersedes=(), expr=None, predicate="lives_in"):
    """A wire v3 claim about the user quoting event 0 (the codec renders its statement, e.g.
    "The user lives in Porto.")."""
    return wire_claim(quotes=[(quote, 0)], value=value, predicate=predicate,
                      time_expression=expr, supersedes=list(supersedes))


def extract_text(*claims):
    return dump_answer("extract", {"claims": list(claims)})


PORTO = extract_text(claim("I live in Porto.", "Porto"))
LISBON = extract_text(claim("I moved to Lisbon last month.", "Lisbon", supersedes=["M1"],
                            expr="last month"))


def store_with(tmp_path, *outputs, backend=None):
    worker = MemWorkerBackend(backend if backend is not None else ReplayBackend(outputs))
    return LiveStore(tmp_path / "store.db", worker)


def snapshot(store):
    """The store's bytes (database and WAL files) and its logical dump."""
    files = {p.name: p.read_bytes() for p in (store.path, Path(f"{store.path}-wal"))
             if p.is_file()}
    return files, list(store.db.iterdump())


# --- the store ----------------------------------------------------------------------------------

def test_supersession_keeps_history(tmp_path):
    store = store_with(tmp_path, PORTO, LISBON)
    store.add_episode("s1", S1, T1)
    assert store.extract("s1", S1, T1) == ["M1"]
    store.add_episode("s2", S2, T2)
    assert store.extract("s2", S2, T2) == ["M2"]
    old, new = store.memories()
    assert (old["valid_to"], old["superseded_by"]) == (T2, "M2")
    assert new["valid_to"] is None and new["event_date"] == "2025-02"
    assert new["source_ids"] == ["s2-0"] and len(new["content_hash"]) == 64
    assert [m["id"] for m in store.memories(active=True)] == ["M2"]
    assert [m["id"] for m in store.memories(as_of="2024-12-01T00:00:00+00:00")] == ["M1"]
    assert [m["id"] for m in store.memories(active=False)] == ["M1"]
    assert store.links("M2") == [{"relation": "supersedes", "target_id": "M1"}]
    assert [e["name"] for e in store.rows("entities")] == ["the user", "the user"]
    # the worker saw the active memory as an existing fact, with its id
    sent = store.worker.backend.calls[1]["messages"][1]["content"]
    assert "M1: The user lives in Porto. (since 2024-09-12)" in sent


def test_store_is_wal_and_add_only(tmp_path):
    store = store_with(tmp_path, PORTO, LISBON)
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.add_episode("s1", S1, T1)
    store.extract("s1", S1, T1)
    with pytest.raises(sqlite3.DatabaseError, match="add-only"):
        store.db.execute("DELETE FROM memories")
    with pytest.raises(sqlite3.DatabaseError, match="add-only"):
        store.db.execute("UPDATE memories SET text = 'The user lives in Faro.'")
    with pytest.raises(sqlite3.DatabaseError, match="add-only"):
        store.db.execute("UPDATE memories SET valid_to = '2025-01-01T00:00:00+00:00'")  # no by
    store.add_episode("s2", S2, T2)
    store.extract("s2", S2, T2)
    for table in ("episodes", "entities", "links", "worker_calls"):   # all non-empty now
        with pytest.raises(sqlite3.DatabaseError, match="add-only"):
            store.db.execute(f"DELETE FROM {table}")
        with pytest.raises(sqlite3.DatabaseError, match="add-only"):
            store.db.execute(f"UPDATE {table} SET user_id = 'u2'" if table != "links"
                             else "UPDATE links SET relation = 'x'")
    with pytest.raises(sqlite3.DatabaseError, match="add-only"):   # superseded once only
        store.db.execute("UPDATE memories SET valid_to = ?, superseded_by = 'M2' WHERE id = 'M1'",
                         ("2026-01-01T00:00:00+00:00",))
    other = sqlite3.connect(store.path)   # a second reader sees the committed rows
    assert other.execute("SELECT COUNT(*) FROM memories").fetchone()[0] == 2
    other.close()


class RaisingBackend:
    name = "raising"

    def generate(self, messages, **kw) -> Generation:
        raise BackendError("model server went away")


@pytest.mark.parametrize("bad,error", [
    ([(PORTO[:40], "length"), (PORTO[:40], "length")], OutputTruncatedError),
    (['{"claims": [', "not json"], OutputParseError),
    (None, BackendError),
])
def test_worker_error_leaves_store_byte_for_byte_unchanged(tmp_path, bad, error):
    good = store_with(tmp_path, PORTO)
    good.add_episode("s1", S1, T1)
    good.extract("s1", S1, T1)
    good.add_episode("s2", S2, T2)
    good.close()
    worker = MemWorkerBackend(RaisingBackend() if bad is None else ReplayBackend(bad))
    store = LiveStore(tmp_path / "store.db", worker)
    before = snapshot(store)
    with pytest.raises(error):
        store.extract("s2", S2, T2)
    assert snapshot(store) == before
    with pytest.raises(Exception):  # noqa: B017 - consolidate and reflect roll back as well
        store.reflect("Where does the user live?", "2025-04-01T00:00:00+00:00")
    assert snapshot(store) == before
    assert [m["valid_to"] for m in store.memories()] == [None]


def test_consolidate_and_reflect_errors_roll_back(tmp_path):
    chess = [{"role": "user", "content": "I play chess."}]
    bad_obs = json.dumps({"observations": [{"statement": "The user probably stays in.",
                                            "supports": ["M1", "M1"]}]})
    store = store_with(tmp_path, PORTO, extract_text(claim("I play chess.", "chess",
                                                           predicate="plays")),
                       bad_obs, bad_obs, '{"answer": ""}', "{}")
    for sid, msgs, at in (("s1", S1, T1), ("s2", chess, T2)):
        store.add_episode(sid, msgs, at)
        store.extract(sid, msgs, at)
    # the statements the codec rendered from each claim's predicate and value
    assert [m["text"] for m in store.memories()] == ["The user lives in Porto.",
                                                     "The user plays chess."]
    before = snapshot(store)
    with pytest.raises(OutputValidationError, match="two different facts"):
        store.consolidate(T2)
    assert snapshot(store) == before
    with pytest.raises(OutputValidationError):
        store.reflect("Where does the user live?", "2025-04-01T00:00:00+00:00")
    assert snapshot(store) == before and store.rows("reflections") == []


def test_consolidate_needs_two_facts(tmp_path):
    store = store_with(tmp_path, PORTO)
    store.add_episode("s1", S1, T1)
    store.extract("s1", S1, T1)
    before = snapshot(store)
    assert store.consolidate(T2) == []   # fewer than two facts: no worker call at all
    assert snapshot(store) == before and len(store.worker.backend.calls) == 1


def test_episodes_never_hold_a_secret(tmp_path):
    messages = [{"role": "user", "content": f"The billing sandbox key is {SECRET}, keep it."}]
    store = store_with(tmp_path, extract_text())
    store.add_episode("s1", messages, T1)
    store.extract("s1", messages, T1)
    assert "[REDACTED]" in store.rows("episodes")[0]["text"]
    store.close()
    for p in tmp_path.iterdir():
        assert SECRET.encode() not in p.read_bytes()
    # the worker itself was given the raw text (its own guard is what is being tested)
    assert SECRET in store.worker.backend.calls[0]["messages"][1]["content"]


def test_no_secret_check_can_fail(tmp_path):
    store = store_with(tmp_path, PORTO)
    store.add_episode("s1", S1, T1)
    store.extract("s1", S1, T1)
    scenario = {"secrets": ["Porto"]}
    ok, why = C.check_no_secret(store, scenario, {})
    assert not ok and ("store.db" in why or "wal" in why)
    assert C.check_no_secret(store, {"secrets": ["Lisbon"]}, {})[0]


@pytest.mark.parametrize("answer,text", [
    # wire v4, as a model writes it: the codec reads the citation from the text
    (json.dumps({"answer": "The user lives in Lisbon."}), "The user lives in Lisbon."),
    # the canonical form, ids given (a teacher, the rules)
    (json.dumps({"answer": "Lisbon.", "citations": ["M2"], "insufficient_evidence": False}),
     "Lisbon."),
])
def test_reflect_stores_the_answer_and_retrieves_history(tmp_path, answer, text):
    store = store_with(tmp_path, PORTO, LISBON, answer)
    for sid, msgs, at in (("s1", S1, T1), ("s2", S2, T2)):
        store.add_episode(sid, msgs, at)
        store.extract(sid, msgs, at)
    out = store.reflect("Where does the user live?", "2025-04-01T00:00:00+00:00")
    assert [e["id"] for e in out["evidence"]] == ["M2", "M1"]   # newest first, history kept
    assert out["evidence"][0]["text"].endswith("(date: 2025-02)")
    (row,) = store.rows("reflections")
    assert row["answer"] == text and json.loads(row["citations"]) == ["M2"]


# --- scenarios and checks -------------------------------------------------------------------------

def test_scenarios_cover_the_brief():
    scenarios = load_scenarios()
    assert len(scenarios) >= 8 and len({s["domain"] for s in scenarios}) >= 6
    assert all(len(s["sessions"]) >= 2 or s["consolidate"] for s in scenarios)
    checks = {c for s in scenarios for c in s["checks"]}
    assert checks == set(CHECK_NAMES)
    kinds = {"correction": any(f.get("supersedes") and "value" in f for s in scenarios
                               for x in s["sessions"] for f in x["facts"]),
             "retraction": any(f.get("kind") == "retraction" for s in scenarios
                               for x in s["sessions"] for f in x["facts"]),
             "secret": any(s["secrets"] for s in scenarios),
             "injection": any(x["injection"] for s in scenarios for x in s["sessions"]),
             "rejected": any(s["rejected"] for s in scenarios),
             "same-named": any(sum("relation" in f for f in s["current"]) >= 2
                               for s in scenarios),
             "relative date": any("date" in f for s in scenarios for f in s["current"]),
             "superseded answer": any(C.stale_values(s) and s["questions"]
                                      for s in scenarios)}
    assert all(kinds.values()), kinds


def test_scenario_errors(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("scenarios:\n  - {name: x, sessions: [], checks: [current], colour: red}\n")
    with pytest.raises(ScenarioError, match="unknown key"):
        load_scenarios(path)
    path.write_text("scenarios:\n  - {name: x, sessions: [], checks: [observation]}\n")
    with pytest.raises(ScenarioError, match="needs data"):
        load_scenarios(path)


def test_fact_matches():
    sister = {"subject": "Anna (the user's sister)", "predicate": "lives_in", "value": "Ghent",
              "kind": "fact", "event_date": None}
    assert fact_matches(sister, {"subject": "Anna", "relation": "sister", "value": "Ghent"})
    assert not fact_matches(sister, {"subject": "Anna", "relation": "colleague"})
    assert not fact_matches(sister, {"subject": "Anna", "predicate": "works_at"})
    assert fact_matches({**sister, "value": "Ghent, Belgium"}, {"subject": "Anna",
                                                                "value": "Ghent"})
    assert not fact_matches(sister, {"subject": "Anna", "value": "Ghent", "date": "2025-03-14"})
    cand = {"entities": [{"name": "I", "type": "person"}], "predicate": "location",
            "value": "Lisbon"}
    assert fact_matches(cand, {"subject": "the user", "predicate": "lives_in", "value": "Lisbon"})


def test_rules_behind_the_store_interface():
    worker = MemWorkerBackend(RulesBackend())
    (cand,) = worker.extract([{"role": "user", "content": "I live in Porto."}], [],
                             observed_at=T1)
    assert cand["text"] == "The user lives in Porto." and cand["source_ids"] == [0]
    assert worker.last.task == "extract"


def test_rules_arm_end_to_end_over_every_scenario(tmp_path):
    scenarios = load_scenarios()
    out = tmp_path / "live"
    assert main(["--arm", "rules", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenarios"] == [s["name"] for s in scenarios]
    arm = summary["arms"]["rules"]
    assert arm["total"] == len(scenarios)
    assert arm["passed"] == sum(r["passed"] for r in arm["scenarios"].values())
    for s in scenarios:
        r = arm["scenarios"][s["name"]]
        assert sorted(r["checks"]) == sorted(s["checks"]) and r["passed"] == all(r["checks"].values())
        calls = len(s["sessions"]) + bool(s["consolidate"]) + len(s["questions"])
        assert r["isolated"]["total"] == calls and 0 <= r["isolated"]["passed"] <= calls
        for check in ("identity", "no_secret", "injection_inert", "rejected_not_stored"):
            assert r["checks"].get(check, True), (s["name"], check, r["why"])
        folder = out / "rules" / s["name"]
        assert (folder / "store.db").is_file() and (folder / "calls.jsonl").is_file()
    assert summary["worker"]["rules"]["gguf_sha256"] is None
    assert set(summary["worker"]["rules"]["prompt_sha256"]) == {"SYSTEM", "EXTRACT",
                                                                "CONSOLIDATE", "REFLECT"}
    assert "| scenario | rules live | rules isolated |" in (out / "report.md").read_text()
    # deterministic: a second run (--fresh: played again, not reused) gives the same verdicts
    assert main(["--arm", "rules", "--out", str(out), "--fresh"]) == 0
    assert json.loads((out / "summary.json").read_text())["config"]["reused"] == {"rules": []}
    again = json.loads((out / "summary.json").read_text())["arms"]["rules"]
    strip = {n: {k: v for k, v in r.items() if k != "seconds"}
             for n, r in again["scenarios"].items()}
    assert strip == {n: {k: v for k, v in r.items() if k != "seconds"}
                     for n, r in arm["scenarios"].items()}


def test_a_turns_form_run_leaves_the_rules_arm_as_it_is_and_gates_only_model_arms(tmp_path,
                                                                                   capsys):
    """--extract-form is for model arms: the rules arm answers in the window form with the same
    verdicts; --claim-gate gates a named model arm (its identity says so), never the rules; a
    bad gate is refused before anything is written."""
    from memworker.eval.live.resume import arm_identity
    from memworker.eval.runner import Arm, Sampler

    plain, turns = tmp_path / "plain", tmp_path / "turns"
    assert main(["--arm", "rules", "--out", str(plain), "--only", "allergy-correction"]) == 0
    assert main(["--arm", "rules", "--out", str(turns), "--only", "allergy-correction",
                 "--extract-form", "turns"]) == 0
    one, two = (json.loads((d / "summary.json").read_text()) for d in (plain, turns))
    assert two["config"]["sampler"]["extract_form"] == "turns"
    assert "extract_form" not in one["config"]["sampler"]
    once = tmp_path / "once"   # read once, timestamps to the minute: model arms only, recorded
    assert main(["--arm", "rules", "--out", str(once), "--only", "allergy-correction",
                 "--extract-form", "turns", "--turn-history", "none",
                 "--event-stamps", "minute"]) == 0
    three = json.loads((once / "summary.json").read_text())
    assert {k: three["config"]["sampler"][k] for k in ("turn_history", "event_stamps")} == \
        {"turn_history": "none", "event_stamps": "minute"}
    assert {k: v for k, v in three["arms"]["rules"]["scenarios"]["allergy-correction"].items()
            if k != "seconds"} == {k: v for k, v in two["arms"]["rules"]["scenarios"][
                "allergy-correction"].items() if k != "seconds"}
    strip = [{k: v for k, v in s["arms"]["rules"]["scenarios"]["allergy-correction"].items()
              if k != "seconds"} for s in (one, two)]
    assert strip[0] == strip[1]
    capsys.readouterr()
    for gate, why in (("max(x)>=1", "unknown claim score"), ("rules=-1", "rules arm"),
                      ("nobody=-1", "no arm named")):
        assert main(["--arm", "rules", "--out", str(tmp_path / "bad"), "--claim-gate",
                     gate]) == 2
        assert why in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    served = Arm("student", "openai", "http://127.0.0.1:1/v1", "first(predicate)+first(value)>=-1")
    assert arm_identity(served, Sampler())["model"]["claim_gate"] == served.claim_gate
    assert "propose" not in arm_identity(served, Sampler())["model"]
    proposing = Arm("student", "openai", "http://127.0.0.1:1/v1", served.claim_gate, True)
    assert arm_identity(proposing, Sampler())["model"]["propose"] is True
    for extra, why in ((["--propose"], "applies to --extract-form turns"),
                       (["--propose", "--extract-form", "turns", "--arm", "s=ollama:x"],
                        "no --claim-gate to keep or drop"),
                       (["--turn-history", "none"], "--turn-history applies to --extract-form")):
        assert main(["--arm", "rules", "--out", str(tmp_path / "bad"), *extra]) == 2
        assert why in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_identity_check_sees_a_changed_prompt(tmp_path, monkeypatch):
    """The identity check hashes the prompt files from disk at the end of the scenario."""
    import memworker.prompts as P

    before = identity("rules", "")
    fake = tmp_path / "prompts"
    fake.mkdir()
    for name in P.TEMPLATE_NAMES:
        (fake / f"{name}.txt").write_bytes((P.prompt_dir() / f"{name}.txt").read_bytes())
    (fake / "REFLECT.txt").write_text("changed")
    monkeypatch.setattr(P, "prompt_dir", lambda: fake)
    after = identity("rules", "")
    ok, why = C.check_identity(None, {}, {"identity_before": before, "identity_after": after})
    assert not ok and "changed" in why


def test_injection_check_fails_when_a_memory_is_retired(tmp_path):
    scenario = next(s for s in load_scenarios() if s["name"] == "injected-tool-text")
    store = store_with(tmp_path, PORTO, LISBON)
    store.add_episode("s1", S1, T1)
    store.extract("s1", S1, T1)
    store.add_episode("s2", S2, T2)
    store.extract("s2", S2, T2)   # retires M1
    ok, why = C.check_injection_inert(store, scenario,
                                      {"active_before_injection": {"s2": ["M1"]}})
    assert not ok and "retired" in why


def test_play_records_failed_calls(tmp_path):
    scenario = next(s for s in load_scenarios() if s["name"] == "guitar-retraction")
    worker = MemWorkerBackend(RaisingBackend())
    result = play(scenario, worker, tmp_path / "run")
    assert result["failed_calls"] == result["worker_calls"] == 3
    assert result["isolated"] == {"passed": 0, "total": 3, "calls": result["isolated"]["calls"]}
    assert not result["passed"] and result["checks"]["identity"]
    store = LiveStore(tmp_path / "run" / "store.db", RecordingWorker(worker))
    assert len(store.rows("episodes")) == 2 and store.memories() == []


# --- resume: arms run at different times into one summary -----------------------------------------

def _comparable(out):
    """summary.json without what depends on when and how often it ran."""
    doc = json.loads((out / "summary.json").read_text())
    for key in ("seconds", "reused", "environment"):
        doc["config"].pop(key)
    for arm in doc["arms"].values():
        for r in arm["scenarios"].values():
            r.pop("seconds")
    return doc


def _count_plays(monkeypatch, fail_at=None):
    """Record every scenario the runner plays; raise on play number `fail_at` (1-based)."""
    import memworker.eval.live.runner as R

    played, real = [], R.play

    def counting(scenario, worker, folder, *a, **kw):
        if fail_at is not None and len(played) + 1 == fail_at:
            raise RuntimeError("interrupted")
        played.append((folder.parent.name, scenario["name"]))
        return real(scenario, worker, folder, *a, **kw)

    monkeypatch.setattr(R, "play", counting)
    return played


def test_live_resume_adds_an_arm_like_a_one_shot_run(tmp_path, monkeypatch):
    names = [s["name"] for s in load_scenarios()]
    later, once = tmp_path / "later", tmp_path / "once"
    played = _count_plays(monkeypatch)
    assert main(["--arm", "rules", "--out", str(later)]) == 0
    stores = {p: p.read_bytes() for p in (later / "rules").rglob("*") if p.is_file()}
    played.clear()
    assert main(["--arm", "rules", "--arm", "r2=rules", "--out", str(later)]) == 0
    assert played == [("r2", n) for n in names]   # the rules arm was reused, not played
    assert {p: p.read_bytes() for p in (later / "rules").rglob("*") if p.is_file()} == stores
    summary = json.loads((later / "summary.json").read_text())
    assert summary["config"]["reused"] == {"rules": sorted(names), "r2": []}
    assert summary["config"]["seconds"]["rules"] > 0
    assert main(["--arm", "rules", "--arm", "r2=rules", "--out", str(once)]) == 0
    assert _comparable(later) == _comparable(once)
    # naming one arm again builds the summary from its stored results alone, playing nothing
    played.clear()
    assert main(["--arm", "r2=rules", "--out", str(later)]) == 0
    assert played == [] and list(json.loads((later / "summary.json").read_text())["arms"]) == ["r2"]


def test_live_resumes_after_an_interruption(tmp_path, monkeypatch):
    names = [s["name"] for s in load_scenarios()]
    out, once = tmp_path / "live", tmp_path / "once"
    _count_plays(monkeypatch, fail_at=3)
    with pytest.raises(RuntimeError, match="interrupted"):
        main(["--arm", "rules", "--out", str(out)])
    assert sorted(p.stem for p in (out / "results" / "rules").glob("*.json")) == sorted(names[:2])
    assert not (out / "summary.json").exists()
    monkeypatch.undo()
    played = _count_plays(monkeypatch)
    assert main(["--arm", "rules", "--out", str(out)]) == 0
    assert played == [("rules", n) for n in names[2:]]
    assert main(["--arm", "rules", "--out", str(once)]) == 0
    assert _comparable(out) == _comparable(once)


def test_live_refuses_a_stale_stored_result(tmp_path, monkeypatch, capsys):
    import memworker.eval.live.resume as RS

    scenarios = tmp_path / "s.yaml"
    scenarios.write_bytes(Path(C.__file__).with_name("scenarios.yaml").read_bytes())
    out = tmp_path / "live"
    base = ["--arm", "rules", "--scenarios", str(scenarios), "--out", str(out)]
    assert main(base) == 0
    capsys.readouterr()
    played = _count_plays(monkeypatch)

    def refused(argv, *what):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "--fresh" in err and "another --out" in err, err
        assert all(w in err for w in what), err
        assert played == []

    refused(base + ["--max-tokens", "64"], "sampler.max_tokens_cap")
    refused(base + ["--seed", "1"], "sampler.seed")
    scenarios.write_text(scenarios.read_text().replace("Porto", "Braga"))
    refused(base, "scenario_file_sha256", "scenario_sha256")
    scenarios.write_text(scenarios.read_text() + "# a comment\n")
    refused(base, "scenario_file_sha256")
    real = RS.code_hashes()
    monkeypatch.setattr(RS, "code_hashes",
                        lambda: {**real, "inference/codec.py": "0" * 64})
    scenarios.write_text(scenarios.read_text().replace("# a comment\n", "")
                         .replace("Braga", "Porto"))
    refused(base, "code inference/codec.py", "--accept-code-change")
    assert main(base + ["--accept-code-change"]) == 0 and played == []
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["code_changed"] == {"rules": ["inference/codec.py"]}
    monkeypatch.setattr(RS, "code_hashes", lambda: real)
    scenarios.write_text(scenarios.read_text().replace("Porto", "Braga"))
    assert main(base + ["--fresh"]) == 0
    assert len(played) == len(load_scenarios(scenarios))


def test_gguf_arm_identity_is_the_model_bytes_and_threads(tmp_path):
    from memworker.eval.live.resume import arm_identity, differences
    from memworker.eval.runner import Arm, Sampler
    from memworker.hashing import sha256_file
    from memworker.inference.backends import default_threads

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF one")
    arm = Arm("base", "gguf", str(model))
    first = arm_identity(arm, Sampler())
    assert first["model"]["gguf_sha256"] == sha256_file(model) and first["model"]["llama_cpp"]
    assert first["sampler"]["threads"] == default_threads(model.stat().st_size) == 1  # small
    moved = tmp_path / "elsewhere.gguf"   # the same bytes under another path: the same identity
    moved.write_bytes(model.read_bytes())
    assert arm_identity(Arm("base", "gguf", str(moved)), Sampler()) == first
    model.write_bytes(b"GGUF two")
    assert differences(first, arm_identity(arm, Sampler(threads=2))) == [
        "model.gguf_sha256", "sampler.threads"]
    assert "threads" not in arm_identity(Arm("rules", "rules", ""), Sampler(threads=3))["sampler"]


def test_sampler_fields_added_later_leave_stored_identities_alone():
    """The committed live results were stored before the sampler had an extract form and a turn
    quote rule: at their defaults those fields are not part of the identity (else every stored
    result would read as stale), and set they are."""
    from memworker.eval.live.resume import arm_identity
    from memworker.eval.runner import Arm, Sampler

    root = Path(__file__).resolve().parents[1]
    def stored(folder: str) -> dict:
        path = next((root / folder / "results/rules").glob("*.json"))
        return json.loads(path.read_text())["identity"]["sampler"]

    rules = Arm("rules", "rules", "")
    # the first release's live run (receipts/v1/live), stored before those fields came
    assert arm_identity(rules, Sampler(max_tokens_cap=1024))["sampler"] == stored("receipts/v1/live")
    turns = arm_identity(rules, Sampler(max_tokens_cap=1024, extract_form="turns"))
    assert turns["sampler"]["extract_form"] == "turns"
    # the committed release's (v2: every arm run with the turns form)
    assert turns["sampler"] == stored("receipts/live")


# --- the real embedded base (slow) ----------------------------------------------------------------

@pytest.mark.slow
def test_embedded_base_through_one_scenario(embedded_gguf, tmp_path):
    out = tmp_path / "live"
    assert main(["--arm", f"base={embedded_gguf}", "--only", "guitar-retraction", "--out",
                 str(out), "--threads", "1", "--n-ctx", "2048", "--max-tokens", "256"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    r = summary["arms"]["base"]["scenarios"]["guitar-retraction"]
    assert r["worker_calls"] == 3 and r["isolated"]["total"] == 3
    assert r["checks"]["identity"] and set(r["checks"]) == {"supersession", "reflection",
                                                            "identity"}
    assert summary["worker"]["base"]["gguf_sha256"] == r["identity"]["gguf_sha256"]
    calls = [json.loads(x) for x in (out / "base" / "guitar-retraction" / "calls.jsonl")
             .read_text().splitlines()]
    assert [c["task"] for c in calls] == ["extract", "extract", "reflect"]
    assert all(c.get("completion_tokens") or c.get("error") for c in calls)
    store = LiveStore(out / "base" / "guitar-retraction" / "store.db", None)
    episodes = {e["id"] for e in store.rows("episodes")}
    for m in store.memories():   # every stored memory cites stored episodes
        assert set(m["source_ids"]) <= episodes
    assert len(store.rows("worker_calls")) == 3 - sum(1 for c in calls if c.get("error"))
    # the same command again reuses the stored result (the model's bytes, threads, sampler match)
    argv = ["--arm", f"base={embedded_gguf}", "--only", "guitar-retraction", "--out", str(out),
            "--threads", "1", "--n-ctx", "2048", "--max-tokens", "256"]
    assert main(argv) == 0
    again = json.loads((out / "summary.json").read_text())
    assert again["config"]["reused"] == {"base": ["guitar-retraction"]}
    assert again["arms"] == summary["arms"]
    assert main(argv[:-1] + ["128"]) == 2   # another cap: refused, not reused
