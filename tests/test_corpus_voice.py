"""The re-voiced generator (issue 47 item 2): `--voice natural` rewrites the extract windows as
people write, and the labels stay correct by construction (fast tier; a small build)."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path

import pytest

from memworker.corpus import audit_rows, build_corpus, tables
from memworker.corpus.build import build_args, generate_rows, load_rows
from memworker.corpus.setstats import stats
from memworker.corpus.voice import voice_row, voice_rows
from memworker.spans import candidate_spans
from memworker.temporal import find_expressions
from memworker.textnorm import hedged

SPLITS = ("train", "val", "test")


@pytest.fixture(scope="module")
def generated() -> tuple[list[dict], dict[str, str]]:
    return generate_rows("general", seed=5, episodes=160)


@pytest.fixture(scope="module")
def voiced(generated) -> tuple[list[dict], dict]:
    rows, _ = generated
    return voice_rows(copy.deepcopy(rows), 5, "natural")


def _items(row: dict) -> list[dict]:
    return [*row["gold"].get("claims", []), *(row.get("truth") or {}).get("facts", [])]


def test_the_voice_is_deterministic_and_changes_only_extract_windows(generated, voiced):
    rows, _ = generated
    again, report = voice_rows(copy.deepcopy(rows), 5, "natural")
    assert json.dumps(again, sort_keys=True) == json.dumps(voiced[0], sort_keys=True)
    assert report == voiced[1]
    other_seed, _ = voice_rows(copy.deepcopy(rows), 6, "natural")
    assert json.dumps(other_seed, sort_keys=True) != json.dumps(again, sort_keys=True)
    changed = 0
    for plain, v in zip(rows, voiced[0], strict=True):
        assert plain["id"] == v["id"]
        if plain["task"] != "extract":
            assert plain == v
        else:
            changed += plain != v
    assert changed > 0.8 * sum(r["task"] == "extract" for r in rows)
    counts = voiced[1]["counts"]
    assert counts["merged_windows"] and counts["fillers"] and counts["emoji"]
    assert counts["shortenings"] and counts["dropped_periods"]
    assert counts["messages_voiced"] > 5 * counts.get("messages_kept_as_generated", 0)


def test_every_quote_is_a_quotable_span_of_a_cited_event(voiced):
    for row in voiced[0]:
        if row["task"] != "extract":
            continue
        texts = {e["index"]: e["text"] for e in row["input"]["events"]}
        for item in _items(row):
            for q in item.get("quotes") or []:
                assert any(q in texts[i] and q in candidate_spans(texts[i])
                           for i in item["source_indices"]), (row["id"], q)


def test_values_time_expressions_and_hedges_survive(generated, voiced):
    for plain, v in zip(generated[0], voiced[0], strict=True):
        if plain["task"] != "extract":
            continue
        old = {e["index"]: e["text"] for e in plain["input"]["events"]}
        new = {e["index"]: e["text"] for e in v["input"]["events"]}
        for a, b in zip(_items(plain), _items(v), strict=True):
            before = " ".join(old[i] for i in a.get("source_indices", []))
            after = " ".join(new[i] for i in b.get("source_indices", []))
            assert {k: v for k, v in a.items() if k not in ("quotes", "source_indices")} == \
                {k: v for k, v in b.items() if k not in ("quotes", "source_indices")}
            if isinstance(a.get("value"), str) and a["value"] in before:
                assert a["value"] in after, (v["id"], a["value"])
            if a.get("time_expression"):
                assert a["time_expression"] == b["time_expression"]
                texts = {e["index"]: e for e in v["input"]["events"]}
                assert any(a["time_expression"] in find_expressions(texts[i]["text"],
                                                                     texts[i]["timestamp"])
                           for i in b.get("source_indices", [])), (v["id"], a["time_expression"])
            for qa, qb in zip(a.get("quotes") or [], b.get("quotes") or [], strict=True):
                assert hedged(qa) == hedged(qb), (qa, qb)


def test_the_voiced_rows_pass_the_audit_before_any_repair(generated, voiced):
    found = audit_rows(voiced[0], generated[1])
    assert not found, Counter(x.code for vs in found.values() for x in vs)


def test_the_voice_moves_the_rows_toward_how_people_write(generated, voiced):
    plain, v = stats(generated[0]), stats(voiced[0])
    assert v["words per user message, mean"] > 1.4 * plain["words per user message, mean"]
    assert v["required facts per user message"] > plain["required facts per user message"]
    assert v["lowercase starts"] > 0.6 > plain["lowercase starts"]
    assert v["slang or emoji"] > 0.4 > plain["slang or emoji"]


def test_the_voice_table_holds_fillers_that_state_nothing():
    fillers, emoji, short = tables.voice()
    assert fillers and emoji and short
    for line in fillers:
        assert line == line.lower() and line[-1] in ".!?", line
        assert not find_expressions(line) and not hedged(line), line
        assert not any(c.isdigit() for c in line), line
    assert all(not hedged(p) for p, _ in short)
    assert voice_row({"task": "reflect", "id": "x"}, 1) == {"task": "reflect", "id": "x"}
    with pytest.raises(ValueError, match="unknown voice"):
        voice_rows([], 1, "pirate")


def test_a_small_voiced_build_records_its_voice_is_clean_and_passes_the_probes(tmp_path: Path):
    m = build_corpus(tmp_path / "v", seed=3, episodes=160, count_tokens=False, voice="natural")
    assert m["args"]["voice"] == "natural" and m["voice"]["voice"] == "natural"
    assert "--voice natural" in m["rebuild_args"]
    assert m["audit"]["pre_repair_violations"]["total"] == 0, m["audit"]["violations_by_code"]
    assert m["exclusions"]["total"] == 0, m["exclusions"]["by_reason"]
    probes = m["transfer"]["probes"]
    for name in ("keyword_kind", "correction_regex", "reflect_timestamp"):
        assert probes[name]["pass"], (name, probes[name])
    rows = [r for s in SPLITS for r in load_rows(tmp_path / "v", s, form="canonical")]
    assert any("🙂" in e["text"] or " bc " in e["text"] or e["text"][:1].islower()
               for r in rows if r["task"] == "extract" for e in r["input"]["events"])
    again = build_corpus(tmp_path / "w", seed=3, episodes=160, count_tokens=False,
                         voice="natural")
    assert again["manifest_sha256"] == m["manifest_sha256"]


def test_the_default_build_has_no_trace_of_the_voice():
    assert "--voice" not in build_args(seed=13)
    assert build_args(seed=13, voice="natural")[-2:] == ["--voice", "natural"]
