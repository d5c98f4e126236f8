"""Transfer measurements (memworker.corpus.probes): skeletons and shortcut probes on hand-made
rows whose answer is known, the manifest's transfer / audit / natural sections, and the hedges.

Each probe is shown once on rows that carry its shortcut (it must find it: figure above the
target, pass False) and once on rows that do not (figure at or below the target, pass True).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from memworker.corpus import probes
from memworker.corpus.build import build_corpus, natural_reference
from memworker.corpus.cli import main as cli_main
from memworker.textnorm import hedged

NAMES = ["Ana", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jon", "Kai", "Lea"]
CITIES = ["Lisbon", "Oslo", "Quito", "Perth", "Turin", "Accra", "Hanoi", "Lyon", "Cork", "Bern",
          "Porto", "Riga"]


def _extract(rid: str, split: str, events: list[tuple[str, str]], claims: list[dict],
             truth_values: list[tuple[str, str]]) -> dict:
    return {
        "id": f"{rid}-extract", "task": "extract", "split": split, "domain": "d",
        "family": f"f-{split}", "episode": rid, "behaviours": [],
        "input": {"events": [{"index": i, "role": role, "text": text, "trusted": True,
                              "timestamp": f"2025-03-0{1 + i % 9}T10:1{i % 10}:00+00:00"}
                             for i, (role, text) in enumerate(events)],
                  "existing_facts": []},
        "gold": {"claims": claims},
        "truth": {"facts": [{"subject": s, "value": v} for s, v in truth_values]},
    }


def _claim(event: int, quote: str, kind: str = "fact", correction: bool = False) -> dict:
    return {"source_indices": [event], "quotes": [quote], "kind": kind,
            "is_correction": correction}


def _templated(split: str, n: int, offset: int = 0) -> list[dict]:
    """Rows from three fixed templates (the v1 shape): a shortcut in every probe."""
    rows = []
    for k in range(n):
        name, city = NAMES[(k + offset) % 12], CITIES[(k * 5 + offset) % 12]
        belief = f"{name} thinks I should move to {city}."
        plan = f"I am going to visit {city} next Friday."
        fact = f"{name} lives in {city}."
        fix = f"Actually, {name} lives in {CITIES[(k + 3) % 12]} now."
        events = [("user", belief), ("assistant", "Thanks for the update."), ("user", plan),
                  ("user", fact), ("user", fix)]
        claims = [_claim(0, belief, "belief"), _claim(2, plan, "plan"), _claim(3, fact),
                  _claim(4, fix, "fact", True)]
        rows.append(_extract(f"{split}-{k}", split, events, claims,
                             [(name, city), ("the user", city)]))
    return rows


# ----------------------------------------------------------------------------- skeletons


def test_skeleton_masks_world_values_dates_numbers_and_names() -> None:
    rows = _extract("e1", "train", [("user", "x")], [],
                    [("Emily (the user's roommate)", "the Barro studio")])
    m = probes.Masker([rows])
    assert m.skeleton("Emily booked the Barro studio for next Friday at 3pm.", "e1") == \
        "<v> booked <v> for <d> at <d>"
    assert m.skeleton("Order 4471 ships in two weeks; ask Marco.", "e1") == \
        "order <#> ships <d> ask <v>"
    assert m.skeleton("It may rain in May.", "e1") == "it may rain in <d>"
    assert m.skeleton("Key AKIA9PTV71PRYTTRY993 is here.", "e1") == "key <s> is here"


def test_skeleton_overlap_finds_reused_templates_and_new_phrasings() -> None:
    same = _templated("train", 8) + _templated("val", 3, 5) + _templated("test", 4, 7)
    report = probes.skeleton_overlap(same)
    assert report["overlap_test"] == 1.0 and report["pass"] is False
    assert report["skeletons_covering_half"] <= 3
    fresh = _templated("train", 8) + [
        _extract(f"t{k}", "test", [("user", f"Honestly the drive to {CITIES[k]} wrecked me, "
                                            f"{'never again' if k % 2 else 'what a day'}.")],
                 [], [("the user", CITIES[k])]) for k in range(4)]
    report = probes.skeleton_overlap(fresh)
    assert report["overlap_test"] == 0.0 and report["pass"] is True


# ------------------------------------------------------------------------------- probes


def _untemplated(split: str, n: int, offset: int = 0) -> list[dict]:
    """Rows whose labels do not follow their surface words: the same cue words appear under
    every kind and correction flag, and corrections have no trigger word."""
    rows = []
    kinds = ["belief", "plan", "fact", "preference", "event", "relationship"]
    for k in range(n):
        name, city = NAMES[(k + offset) % 12], CITIES[(k * 7 + offset) % 12]
        texts = [f"{name} thinks the ferry to {city} is going to be late, actually.",
                 f"So {name} and I ended up in {city} after the concert.",
                 f"Not sure why, but {city} keeps coming up with {name}."]
        events = [("user", t) for t in texts]
        claims = [_claim(i, t, kinds[(k + i + offset) % 6], correction=(k + i) % 2 == 0)
                  for i, t in enumerate(texts)]
        rows.append(_extract(f"{split}-u{k}", split, events, claims, [(name, city)]))
    return rows


def test_keyword_and_correction_probes_find_trigger_words() -> None:
    rows = _templated("train", 10) + _templated("test", 6, 3)
    kind = probes.keyword_kind(rows)
    assert kind["figure"] == 1.0 and kind["pass"] is False
    fix = probes.correction_regex(rows)
    assert fix["figure"] == 1.0 and fix["pass"] is False


def test_keyword_and_correction_probes_fail_without_trigger_words() -> None:
    rows = _untemplated("train", 30) + _untemplated("test", 12, 5)
    kind = probes.keyword_kind(rows)
    assert kind["figure"] <= 0.35 and kind["pass"] is True
    fix = probes.correction_regex(rows)
    assert fix["figure"] <= 0.6 and fix["pass"] is True
    assert 0.0 <= fix["accuracy"] <= 1.0 and fix["majority_share"] >= 0.5


def test_skeleton_lookup_recalls_template_quotes_only() -> None:
    rows = _templated("train", 10) + _templated("test", 5, 4)
    found = probes.skeleton_lookup(rows)
    assert found["figure"] == 1.0 and found["precision"] == 1.0 and found["pass"] is False
    fresh = _templated("train", 10)
    for k in range(4):
        text = f"Long story, but {NAMES[k]} finally took the job in {CITIES[k]}."
        fresh.append(_extract(f"t{k}", "test", [("user", text)], [_claim(0, text)],
                              [(NAMES[k], CITIES[k])]))
    missed = probes.skeleton_lookup(fresh)
    assert missed["figure"] == 0.0 and missed["pass"] is True


def _reflect(rid: str, split: str, stamps: list[str], cited: list[int]) -> dict:
    evidence = [{"id": f"E{i + 1}", "text": f"Fact {i}.", "timestamp": t}
                for i, t in enumerate(stamps)]
    return {"id": f"{rid}-reflect", "task": "reflect", "split": split, "domain": "d",
            "family": f"f-{split}", "episode": rid, "behaviours": [],
            "input": {"question": "?", "asked_at": "2025-03-20T18:00:00+00:00",
                      "evidence": evidence},
            "gold": {"answer": "a", "citations": [f"E{i + 1}" for i in cited],
                     "insufficient_evidence": not cited},
            "truth": {}}


def test_reflect_timestamp_probe_finds_noon_stamps() -> None:
    rows = []
    for split, n in (("train", 40), ("test", 20)):
        for k in range(n):
            stamps = ["2025-03-01T12:00:00+00:00", "2025-03-05T12:00:00+00:00",
                      "2025-03-10T12:00:00+00:00"]
            cited = [] if k % 3 == 0 else [k % 3]
            for i in cited:  # the cited item is the one stamped at a real event time
                stamps[i] = f"2025-03-0{i + 4}T09:{10 + k % 40}:00+00:00"
            rows.append(_reflect(f"{split}-{k}", split, stamps, cited))
    probe = probes.reflect_timestamp(rows)
    assert probe["figure"] == 1.0 and probe["pass"] is False
    assert probe["majority_outcome"] in (["abstain"], ["E2"], ["E3"])


def test_reflect_timestamp_probe_fails_on_uninformative_stamps() -> None:
    rng = random.Random(7)  # timestamps and labels drawn independently of each other
    rows = []
    for split, n in (("train", 300), ("test", 300)):
        for k in range(n):
            stamps = [f"2025-03-{rng.randint(1, 19):02d}T{rng.randint(8, 20):02d}:"
                      f"{rng.randint(0, 59):02d}:00+00:00" for _ in range(3)]
            cited = [] if rng.random() < 0.5 else [rng.randrange(3)]
            rows.append(_reflect(f"{split}-{k}", split, stamps, cited))
    probe = probes.reflect_timestamp(rows)
    assert probe["pass"] is True, probe
    assert probe["figure"] <= probe["majority_share"] + 0.10
    assert probe["citation_on_answerable"] <= probe["citation_chance"] + 0.10


def _consolidate(rid: str, split: str, facts: list[str], obs: list[tuple[str, list[str]]]
                 ) -> dict:
    return {"id": f"{rid}-consolidate", "task": "consolidate", "split": split, "domain": "d",
            "family": f"f-{split}", "episode": rid, "behaviours": [],
            "input": {"facts": [{"id": f"F{i + 1}", "statement": s}
                                for i, s in enumerate(facts)]},
            "gold": {"observations": [{"statement": s, "supports": sup} for s, sup in obs]},
            "truth": {"observations": [{"statement": s, "supports": sup, "subject": "x"}
                                       for s, sup in obs]}}


def test_pair_table_reproduces_fixed_pairs_and_misses_open_combinations() -> None:
    def fixed(split: str, k: int) -> dict:
        n = NAMES[k % 12]
        return _consolidate(f"{split}-{k}", split,
                            [f"{n} is preparing a promotion case.", "The user likes tea.",
                             f"{n} has been staying late most evenings."],
                            [(f"{n} is probably pushing for a promotion.", ["F1", "F3"])])

    rows = [fixed("train", k) for k in range(10)] + [fixed("test", k + 3) for k in range(5)]
    probe = probes.pair_table(rows)
    assert probe["figure"] == 1.0 and probe["pass"] is False
    open_rows = [fixed("train", k) for k in range(10)] + [
        _consolidate(f"test-o{k}", "test",
                     [f"{NAMES[k]} signed up for a {CITIES[k]} half marathon.",
                      f"{NAMES[k]} bought trail shoes.", "The user likes tea."],
                     [(f"{NAMES[k]} may be training for a race.", ["F1", "F2"])])
        for k in range(5)]
    probe = probes.pair_table(open_rows)
    assert probe["figure"] == 0.0 and probe["pass"] is True


def test_transfer_report_is_deterministic_and_complete() -> None:
    rows = _templated("train", 6) + _templated("val", 2, 2) + _templated("test", 3, 5)
    a, b = probes.transfer_report(rows), probes.transfer_report(json.loads(json.dumps(rows)))
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert set(a["probes"]) == {"keyword_kind", "correction_regex", "skeleton_lookup",
                                "reflect_timestamp", "pair_table"}
    for p in a["probes"].values():
        assert {"figure", "target", "pass"} <= set(p)
    assert a["all_pass"] is False
    assert "skeleton overlap" in probes.table(a)


# ------------------------------------------------------------------------ manifest, CLI


def test_small_build_records_transfer_audit_and_natural(tmp_path: Path, capsys) -> None:
    natural = tmp_path / "nat"
    natural.mkdir()
    (natural / "manifest.json").write_text('{"manifest_sha256": "abc"}\n')
    m = build_corpus(tmp_path / "c", seed=3, episodes=64, count_tokens=False,
                     natural_manifest=natural)
    assert m["natural"]["manifest_sha256"] == "abc"
    assert len(m["natural"]["manifest_file_sha256"]) == 64
    assert set(m["transfer"]["probes"]) >= {"keyword_kind", "pair_table"}
    pre = m["audit"]["pre_repair_violations"]
    assert pre["by_code"] == m["audit"]["violations_by_code"]
    assert pre["total"] == sum(pre["by_code"].values())
    assert "repaired_from_truth" in m["audit"]
    assert cli_main(["--probes", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "keyword_kind" in out and "skeleton overlap" in out


def test_natural_reference_is_optional_but_a_given_path_must_exist(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert natural_reference() is None
    with pytest.raises(FileNotFoundError, match="corpus/build.py --natural"):
        natural_reference(tmp_path / "missing")


@pytest.mark.slow  # a default-sized build: about 40 s on 2 shared cores
def test_default_corpus_passes_the_audit_before_repair(tmp_path: Path) -> None:
    """Issue 11 item 6: the generator's rows pass the audit before any repair. Goes green once
    the v2 generator (and its calendar under the temporal weekday convention) is merged."""
    m = build_corpus(tmp_path / "d", seed=13, count_tokens=False)
    assert m["audit"]["pre_repair_violations"]["total"] == 0, m["audit"]["violations_by_code"]
    assert m["audit"]["repaired_from_truth"] == 0


# ------------------------------------------------------------------------------- hedges


@pytest.mark.parametrize(("text", "expected"), [
    ("Ana seems to be moving.", True), ("It appears she left.", True),
    ("Ben reckons it works.", True), ("Apparently he quit.", True),
    ("He probably knows.", True), ("She might come.", True), ("I guess it's fine.", True),
    ("The mayor came.", False), ("The user works at Greenleaf Bank.", False),
])
def test_hedges_are_whole_words(text: str, expected: bool) -> None:
    assert hedged(text) is expected
