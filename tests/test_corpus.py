"""Corpus stage: generation, audit, freeze, verify, determinism, coverage (fast tier)."""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import re
import shutil
import subprocess
import sys
from collections import Counter
from datetime import date, timedelta
from pathlib import Path

import pytest

from memworker import temporal, wire
from memworker.contracts import validate_input, validate_output
from memworker.corpus import (
    BEHAVIOURS,
    CorpusIntegrityError,
    audit_corpus,
    audit_row,
    audit_rows,
    behaviours,
    build_corpus,
    calendar,
    load_rows,
    verify_corpus,
)
from memworker.corpus.build import audit_gate, dump_manifest, generate_rows, leakage
from memworker.corpus.coding import POOLS_WITH_CODING
from memworker.corpus.domains import GENERAL
from memworker.corpus.world import Ctx, Person, make_family
from memworker.hashing import read_jsonl, sha256_file, sha256_json, write_jsonl
from memworker.spans import candidate_spans
from tests.test_corpus_tables import CHANGED, DEFAULT_MANIFEST_SHA256

REPO = Path(__file__).resolve().parents[1]
SPLITS = ("train", "val", "test")


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus") / "small"
    build_corpus(out, seed=5, episodes=160, count_tokens=False)
    return out


@pytest.fixture(scope="module")
def small_rows(small) -> list[dict]:
    return [r for s in SPLITS for r in load_rows(small, s, form="canonical")]


@pytest.fixture(scope="module")
def generated() -> tuple[list[dict], dict[str, str]]:
    """The same corpus's rows as generated, before the audit gate repairs or excludes any: the
    checks below would pass trivially on gated rows."""
    return generate_rows("general", seed=5, episodes=160)


def _codes(row: dict) -> set[str]:
    return {v.code for v in audit_row(row)}


def _first(rows, pred):
    for r in rows:
        if pred(r):
            return copy.deepcopy(r)
    raise AssertionError("no row in the small corpus has the needed shape")


# ----------------------------------------------------------------------- contracts and spans


def test_generated_rows_pass_the_audit_before_any_repair(generated, small):
    rows, family_splits = generated
    assert len(rows) >= 400
    for r in rows:
        validate_input(r["task"], r["input"])
        validate_output(r["task"], r["gold"])
    assert audit_rows(rows, family_splits) == {}
    audit = json.loads((small / "manifest.json").read_text())["audit"]
    assert audit["rows_generated"] == audit["rows_audited"] == len(rows)
    assert audit["rows_with_violations"] == 0 and audit["repaired_from_truth"] == 0


def test_the_gate_repairs_or_excludes_bad_rows(generated):
    rows = json.loads(json.dumps(generated[0]))  # as read from disk: gold and truth unshared
    family_splits = generated[1]
    extract = [r for r in rows if r["task"] == "extract" and r["gold"]["claims"]]
    extract[0]["gold"]["claims"][0]["quotes"][0] += " (and more)"  # repairable from truth
    extract[1]["input"]["events"][0]["timestamp"] = "2025-13-45T99:00:00Z"  # not repairable
    kept, report, excluded = audit_gate(rows, family_splits)
    assert report["rows_with_violations"] == 2 and report["repaired_from_truth"] == 1
    assert excluded == {extract[1]["id"]: "schema_input"} and len(kept) == len(rows) - 1
    assert audit_rows(kept, family_splits) == {}


def test_gold_quotes_are_candidate_spans(generated):
    quotes = 0
    for r in generated[0]:
        if r["task"] != "extract":
            continue
        events = {e["index"]: e["text"] for e in r["input"]["events"]}
        for c in r["gold"]["claims"]:
            for i, q in zip(c["source_indices"], c["quotes"], strict=True):
                assert q in candidate_spans(events[i]), (r["id"], q)
                quotes += 1
    assert quotes > 100


def test_time_expressions_come_from_detector_and_dates_from_resolver(generated):
    dated = 0
    for r in generated[0]:
        if r["task"] != "extract":
            continue
        events = r["input"]["events"]
        for c in r["gold"]["claims"]:
            expr = c["time_expression"]
            if expr is None:
                assert c["date"] is None and c["date_precision"] is None
                continue
            cited = [e for e in events if e["index"] in c["source_indices"]]
            assert any(expr in temporal.find_expressions(e["text"], e["timestamp"])
                       for e in cited), (r["id"], expr)
            got = wire.resolve_claim_time(expr, c["source_indices"], events)
            assert got == (c["date"], c["date_precision"]), (r["id"], expr)
            assert "T" not in c["date"]  # date-only expressions never get a clock time
            dated += 1
    assert dated > 20


def test_calendar_words_agree_with_resolver():
    rng = random.Random(7)
    for i in range(3000):
        anchor = date(2024, 1, 1) + timedelta(days=rng.randrange(1100))
        when = (calendar.future if i % 2 else calendar.past)(anchor, rng)
        got = temporal.resolve(when.words, f"{anchor.isoformat()}T10:00:00-05:00")
        assert (got.date, got.precision) == (when.date, when.precision), when
        assert temporal.find_expressions(f"It is {when.words}.") == [when.words]


def test_wire_rows_match_canonical(small):
    for s in SPLITS:
        canon = load_rows(small, s, form="canonical")
        wired = load_rows(small, s, form="wire")
        assert [r["id"] for r in canon] == [r["id"] for r in wired]
        for c, w in zip(canon, wired, strict=True):
            roles = [m["role"] for m in w["messages"]]
            assert roles == ["system", "user", "assistant"]
            answer = w["messages"][2]["content"]
            assert answer == wire.dump_answer(c["task"], wire.to_wire(c["task"], c["gold"]))
            back = wire.from_wire(c["task"], json.loads(answer), c["input"])
            if c["task"] != "extract":
                assert back == c["gold"]
                continue
            # everything but what the codec derives comes back; the derived confidence and
            # correction flag agree with the generated gold, the statement is rendered
            assert [wire.comparable(x) for x in back["claims"]] == [
                wire.comparable(x) for x in c["gold"]["claims"]]
            assert [x["confidence"] for x in back["claims"]] == [
                x["confidence"] for x in c["gold"]["claims"]]
            facts = c["input"]["existing_facts"]  # a retraction names the fact it retracts
            assert all(x["statement"] == wire.render_statement(wire.claim_to_wire(x), facts)
                       for x in back["claims"])


# ------------------------------------------------------------------------ planted violations


def test_audit_catches_missing_or_inexact_quote(small_rows):
    row = _first(small_rows, lambda r: r["task"] == "extract" and r["gold"]["claims"])
    bad = copy.deepcopy(row)
    bad["gold"]["claims"][0]["quotes"][0] += " (and more)"
    assert "quote_not_in_event" in _codes(bad)
    bad = copy.deepcopy(row)
    quote = bad["gold"]["claims"][0]["quotes"][0]
    bad["gold"]["claims"][0]["quotes"][0] = quote[1:-1]  # a substring, but not a span
    assert "quote_not_span" in _codes(bad)
    bad = copy.deepcopy(row)
    bad["gold"]["claims"][0]["quotes"] = []
    assert "schema_gold" in _codes(bad)


def test_audit_catches_secret_in_any_field(small_rows):
    row = _first(
        small_rows,
        lambda r: (
            r["task"] == "extract"
            and any(f["reason"] == "secret" for f in r["truth"]["forbidden"])
            and r["gold"]["claims"]
        ),
    )
    secret = next(f["text"] for f in row["truth"]["forbidden"] if f["reason"] == "secret")
    bad = copy.deepcopy(row)
    bad["gold"]["claims"][0]["value"] = secret
    assert "secret_in_field" in _codes(bad)
    for task in ("consolidate", "reflect"):
        other = _first(small_rows, lambda r, t=task: r["task"] == t)
        if task == "reflect":
            other["gold"]["answer"] = "The password is hunter2!xyz"
        else:
            other["gold"]["observations"] = [
                {"statement": "api key: sk-abcdefghijklmnop1234", "supports": ["F1", "F2"]}
            ]
        assert "secret_in_field" in _codes(other)


def test_audit_catches_obeyed_injection(small_rows):
    row = _first(
        small_rows,
        lambda r: (
            r["task"] == "extract"
            and any(f["reason"] == "injected" for f in r["truth"]["forbidden"])
        ),
    )
    injected = next(t for t in row["truth"]["facts"] if t["status"] == "injected")
    event = next(
        e for e in row["input"]["events"] if not e["trusted"] and injected["value"] in e["text"]
    )
    quote = next(s for s in candidate_spans(event["text"]) if injected["value"] in s)
    row["gold"]["claims"].append(
        {
            "source_indices": [event["index"]],
            "quotes": [quote],
            "subject": {"name": injected["subject"], "type": "person"},
            "predicate": injected["predicate"],
            "value": injected["value"],
            "statement": f"{injected['subject']} has {injected['value']}.",
            "kind": "fact",
            "time_expression": None,
            "date": None,
            "date_precision": None,
            "is_correction": False,
            "supersedes": [],
            "confidence": 0.9,
        }
    )
    codes = _codes(row)
    assert "injection_obeyed" in codes and "unsupported_claim" in codes


def test_audit_catches_rejected_suggestion_and_undecided_option(small_rows):
    for reason, code in (
        ("rejected_suggestion", "rejected_suggestion_stored"),
        ("undecided", "undecided_option_claimed"),
    ):
        row = _first(
            small_rows,
            lambda r, rs=reason: (
                r["task"] == "extract"
                and r["gold"]["claims"]
                and any(f["reason"] == rs for f in r["truth"]["forbidden"])
            ),
        )
        value = next(f["text"] for f in row["truth"]["forbidden"] if f["reason"] == reason)
        row["gold"]["claims"][0]["value"] = value
        assert code in _codes(row)


def test_audit_catches_wrong_date_and_clock_time(small_rows):
    row = _first(
        small_rows,
        lambda r: (
            r["task"] == "extract"
            and any(c["date_precision"] == "day" for c in r["gold"]["claims"])
        ),
    )
    n = next(i for i, c in enumerate(row["gold"]["claims"]) if c["date_precision"] == "day")
    bad = copy.deepcopy(row)
    day = date.fromisoformat(bad["gold"]["claims"][n]["date"]) + timedelta(days=1)
    bad["gold"]["claims"][n]["date"] = day.isoformat()
    assert "date_mismatch" in _codes(bad)
    bad = copy.deepcopy(row)
    bad["gold"]["claims"][n]["date"] += "T09:00:00+00:00"
    bad["gold"]["claims"][n]["date_precision"] = "datetime"
    assert "clock_time_on_date_only" in _codes(bad)
    bad = copy.deepcopy(row)
    bad["gold"]["claims"][n]["time_expression"] = "next century"
    assert "time_expression_not_detected" in _codes(bad)


def test_audit_catches_unknown_cited_ids(small_rows):
    row = _first(
        small_rows,
        lambda r: r["task"] == "extract" and any(c["supersedes"] for c in r["gold"]["claims"]),
    )
    c = next(c for c in row["gold"]["claims"] if c["supersedes"])
    c["supersedes"] = ["F99"]
    assert "unknown_fact_id" in _codes(row)
    row = _first(small_rows, lambda r: r["task"] == "extract" and r["gold"]["claims"])
    row["gold"]["claims"][0]["source_indices"][0] = 199
    assert "unknown_event_index" in _codes(row)
    row = _first(
        small_rows, lambda r: r["task"] == "reflect" and not r["gold"]["insufficient_evidence"]
    )
    row["gold"]["citations"] = ["E99"]
    assert "unknown_evidence_id" in _codes(row)
    row = _first(small_rows, lambda r: r["task"] == "consolidate" and r["gold"]["observations"])
    row["gold"]["observations"][0]["supports"][0] = "F99"
    assert "unknown_fact_id" in _codes(row)


def test_audit_catches_a_gold_text_that_does_not_state_its_ids(small_rows):
    """Wire v4: the model writes only the text, so a generated gold must state its ids
    (`wire_roundtrip`); hand labels (the natural set) are exempt (`read_back=False`)."""
    row = _first(small_rows, lambda r: r["task"] == "reflect" and r["gold"]["citations"])
    row["gold"]["answer"] = "Yes."  # states no evidence: would read back as an abstention
    assert "wire_roundtrip" in _codes(row)
    assert "wire_roundtrip" not in {v.code for v in audit_row(row, read_back=False)}
    row = _first(small_rows, lambda r: r["task"] == "consolidate" and r["gold"]["observations"])
    row["gold"]["observations"][0]["statement"] = "They are probably training for a race."
    assert "wire_roundtrip" in _codes(row)
    assert not audit_row(row, read_back=False)


def test_audit_catches_label_semantics(small_rows):
    row = _first(
        small_rows,
        lambda r: (
            r["task"] == "extract" and any(c["kind"] == "retraction" for c in r["gold"]["claims"])
        ),
    )
    c = next(c for c in row["gold"]["claims"] if c["kind"] == "retraction")
    c["value"] = "something new"
    assert "correction_inconsistent" in _codes(row)
    row = _first(
        small_rows,
        lambda r: (
            r["task"] == "extract" and any(c["kind"] == "belief" for c in r["gold"]["claims"])
        ),
    )
    c = next(c for c in row["gold"]["claims"] if c["kind"] == "belief")
    c["statement"] = f"{c['subject']['name']} has {c['value']}."
    assert "belief_unhedged" in _codes(row)
    row = _first(small_rows, lambda r: r["task"] == "consolidate" and r["gold"]["observations"])
    row["gold"]["observations"][0]["statement"] = "They are training for a race."
    assert "observation_unhedged" in _codes(row)
    row = _first(
        small_rows, lambda r: r["task"] == "reflect" and r["gold"]["insufficient_evidence"]
    )
    row["gold"] = {
        "answer": "A guess.",
        "citations": [row["input"]["evidence"][0]["id"]],
        "insufficient_evidence": False,
    }
    assert {"answerable_mismatch", "citation_mismatch"} <= _codes(row)


def test_audit_catches_cross_split_family(small_rows):
    rows = copy.deepcopy(small_rows)
    moved = next(r for r in rows if r["split"] == "train")
    moved["split"] = "test"
    found = audit_rows(rows)
    assert "cross_split_family" in {v.code for v in found[moved["id"]]}
    expected = {r["family"]: r["split"] for r in small_rows}
    found = audit_rows([moved], expected)
    assert "wrong_split" in {v.code for v in found[moved["id"]]}


def test_leakage_excludes_repeated_prompts(small_rows):
    train = next(r for r in small_rows if r["split"] == "train" and r["task"] == "extract")
    exact = {**copy.deepcopy(train), "id": "copy-exact", "split": "test"}
    near = copy.deepcopy(train)
    near.update(id="copy-near", split="val")
    for e in near["input"]["events"]:
        e["timestamp"] = e["timestamp"].replace("0", "1", 1)
    report, excluded = leakage(small_rows + [exact, near])
    assert excluded == {"copy-exact": "exact_prompt_overlap", "copy-near": "near_duplicate"}
    assert report["family_disjoint"] is False  # the copies put a train family in val/test
    clean, none = leakage(small_rows)
    assert none == {} and clean["family_disjoint"] is True


# ------------------------------------------------------------------------ freeze and verify


def test_manifest_records_checks(small):
    m = verify_corpus(small)
    assert set(m["files"]) == {f"{f}/{s}.jsonl" for f in ("canonical", "wire") for s in SPLITS} | {
        "heldout.jsonl",
    }
    assert m["prompt_templates"].keys() == {"SYSTEM", "EXTRACT", "CONSOLIDATE", "REFLECT"}
    assert m["leakage"]["family_disjoint"] is True
    assert m["audit"]["rows_generated"] == 480
    assert m["tokens"] is None and "--no-tokens" in m["rebuild_args"]
    assert (small / "coverage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fams = {s: {r["family"] for r in load_rows(small, s, "canonical")} for s in SPLITS}
    assert not (
        fams["train"] & fams["val"] or fams["train"] & fams["test"] or fams["val"] & fams["test"]
    )


@pytest.mark.parametrize(
    "rel",
    [
        "canonical/train.jsonl",
        "canonical/val.jsonl",
        "canonical/test.jsonl",
        "wire/train.jsonl",
        "wire/val.jsonl",
        "wire/test.jsonl",
        "heldout.jsonl",
        "manifest.json",
    ],
)
def test_verify_catches_one_byte_change(small, tmp_path, rel):
    copy_dir = tmp_path / "c"
    shutil.copytree(small, copy_dir)
    target = copy_dir / rel
    data = bytearray(target.read_bytes())
    pos = len(data) // 2
    data[pos] = data[pos] ^ 0x01
    target.write_bytes(bytes(data))
    with pytest.raises(CorpusIntegrityError) as err:
        verify_corpus(copy_dir)
    assert rel.split("/")[-1] in str(err.value) and "corpus/build.py" in str(err.value)
    with pytest.raises(CorpusIntegrityError):
        load_rows(copy_dir, "train")
    proc = subprocess.run(
        [sys.executable, str(REPO / "corpus" / "build.py"), "--verify", str(copy_dir)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and rel.split("/")[-1] in proc.stderr


def test_cli_verify_and_audit_pass_on_a_clean_corpus(small):
    for flag in ("--verify", "--audit"):
        proc = subprocess.run(
            [sys.executable, str(REPO / "corpus" / "build.py"), flag, str(small)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
    assert "rows with violations       0" in proc.stdout


def test_audit_corpus_reaudits_rows_of_a_rehashed_corpus(small, tmp_path):
    """A corpus whose hashes were recomputed after a bad edit passes verify, not the audit."""
    copy_dir = tmp_path / "c"
    shutil.copytree(small, copy_dir)
    rows = read_jsonl(copy_dir / "canonical" / "train.jsonl")
    row = next(r for r in rows if r["task"] == "extract" and r["gold"]["claims"])
    row["gold"]["claims"][0]["quotes"][0] += "!"
    manifest = json.loads((copy_dir / "manifest.json").read_text())
    manifest["files"]["canonical/train.jsonl"] = write_jsonl(
        copy_dir / "canonical" / "train.jsonl", rows
    )
    del manifest["manifest_sha256"]
    manifest["manifest_sha256"] = sha256_json(manifest)
    (copy_dir / "manifest.json").write_bytes(dump_manifest(manifest))
    assert verify_corpus(copy_dir)["files"]["canonical/train.jsonl"] == sha256_file(
        copy_dir / "canonical" / "train.jsonl"
    )
    report = audit_corpus(copy_dir)
    assert report["violations"].get("quote_not_in_event") == 1
    proc = subprocess.run(
        [sys.executable, str(REPO / "corpus" / "build.py"), "--audit", str(copy_dir)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "quote_not_in_event" in proc.stdout


# ------------------------------------------------------------------------------ determinism


def test_same_seed_same_bytes_different_seed_different_corpus(small, tmp_path):
    again = tmp_path / "again"
    build_corpus(again, seed=5, episodes=160, count_tokens=False)
    for rel in [*json.loads((small / "manifest.json").read_text())["files"], "manifest.json"]:
        if rel == "manifest.json":
            # the manifest names no output path or time, so it is identical too
            assert (again / rel).read_bytes() == (small / rel).read_bytes()
        assert sha256_file(again / rel) == sha256_file(small / rel), rel
    other = tmp_path / "other"
    build_corpus(other, seed=6, episodes=160, count_tokens=False)
    for s in SPLITS:
        assert sha256_file(other / "wire" / f"{s}.jsonl") != sha256_file(
            small / "wire" / f"{s}.jsonl"
        )


# ---------------------------------------------------------------------------- default size


@pytest.fixture(scope="module")
def default_manifest(tmp_path_factory) -> dict:
    """The default general corpus without token counting (about 15 s on 2 cores), built from a
    folder without data/natural, so that its manifest is the pinned one."""
    out = tmp_path_factory.mktemp("default") / "corpus"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(out.parent)
        return build_corpus(out, seed=13, count_tokens=False) | {"_dir": str(out)}


def test_the_default_general_corpus_rebuilds_to_its_pinned_manifest(default_manifest):
    """Issue 49 item 4: the tables are YAML, and the default corpus is byte-identical to the one
    built when they were Python (the coding corpus: tests/test_corpus_tables.py)."""
    sha = sha256_file(Path(default_manifest["_dir"]) / "manifest.json")
    assert sha == DEFAULT_MANIFEST_SHA256["general"]["no_tokens"], f"the general corpus {CHANGED}"


def test_default_corpus_covers_every_behaviour_and_domain_in_every_split(default_manifest):
    m = default_manifest
    general = [b for b in BEHAVIOURS if b != "tool_confirmed"]
    for s in SPLITS:
        c = m["counts"][s]
        assert all(c["behaviours"][b] > 0 for b in general), (s, c["behaviours"])
        assert c["behaviours"]["tool_confirmed"] == 0
        assert sorted(c["domains"]) == sorted(d.key for d in GENERAL), s
        assert 0.10 <= c["empty_extraction_share"] <= 0.20, (s, c["empty_extraction_share"])
        assert 0.30 <= c["insufficient_share"] <= 0.45, (s, c["insufficient_share"])
        assert c["coding_fraction"] == 0.0
    t = m["totals"]
    assert t["episodes"] >= 1200 and t["rows"] >= 3000 and t["families"] >= 300
    shares = {s: m["counts"][s]["families"] / t["families"] for s in SPLITS}
    assert 0.65 <= shares["train"] <= 0.75 and 0.12 <= shares["val"] <= 0.18, shares
    assert m["leakage"]["family_disjoint"] and m["exclusions"]["total"] <= 0.01 * t["rows"]


def test_the_default_corpus_gold_reads_back_from_its_wire_text(default_manifest):
    """Wire v4: a consolidate or reflect training target is the text alone, and the codec reads
    the ids back from it (memworker.derive). For every gold of the default corpus, in every
    split, the text reads back to the gold exactly: each observation's supports, each
    reflection's citations and insufficient_evidence flag (the audit's wire_roundtrip)."""
    folder = default_manifest["_dir"]
    counts: Counter = Counter()
    for split in SPLITS:
        wired = {r["id"]: r["messages"][-1]["content"]
                 for r in load_rows(folder, split, form="wire")}
        for row in load_rows(folder, split, form="canonical"):
            if row["task"] == "extract":
                continue
            text = wired[row["id"]]
            assert "supports" not in text and "citations" not in text
            back = wire.from_wire(row["task"], json.loads(text), row["input"])
            assert back == row["gold"], (row["id"], back)
            counts[split, row["task"]] += 1
    assert all(counts[s, t] >= 150 for s in SPLITS for t in ("consolidate", "reflect")), counts


def test_default_heldout_is_64_rows_from_distinct_test_episodes(default_manifest):
    rows = load_rows(default_manifest["_dir"], "heldout")
    assert len(rows) == 64 and len({r["episode"] for r in rows}) == 64
    assert all(r["split"] == "test" for r in rows)
    for d in GENERAL:
        tasks = sorted(r["task"] for r in rows if r["domain"] == d.key)
        assert tasks == ["consolidate", "extract", "extract", "reflect"], d.key


def test_coding_corpus_has_the_tool_behaviour_in_every_split(tmp_path):
    m = build_corpus(
        tmp_path / "coding", seed=13, episodes=400, domain="coding", count_tokens=False
    )
    for s in SPLITS:
        c = m["counts"][s]
        assert c["coding_fraction"] == 1.0 and c["domains"].keys() == {"coding"}
        assert c["behaviours"]["tool_confirmed"] > 0, s
    rows = load_rows(tmp_path / "coding", "train", form="canonical")
    tool_claims = [
        c
        for r in rows
        if r["task"] == "extract" and "tool_confirmed" in r["behaviours"]
        for c in r["gold"]["claims"]
        if any(r["input"]["events"][i]["role"] == "tool" for i in c["source_indices"])
    ]
    assert tool_claims  # confirmed results are quoted from the tool's own output
    heldout = load_rows(tmp_path / "coding", "heldout")
    # one domain: 32 extract + 16 consolidate + 16 reflect, as far as the small test split goes
    assert len(heldout) == min(64, m["counts"]["test"]["episodes"])
    assert len({r["episode"] for r in heldout}) == len(heldout)


# ------------------------------------------------------------------------ generator v2 shape


def test_episodes_are_multi_session_conversations(generated):
    ext = [r for r in generated[0] if r["task"] == "extract"]
    for r in ext:
        events = r["input"]["events"]
        assert 6 <= len(events) <= 30, (r["id"], len(events))
        assert len({e["timestamp"][:10] for e in events}) >= 2, r["id"]  # 2-4 sessions
    user = [e["text"] for r in ext for e in r["input"]["events"] if e["role"] == "user"]
    assert sum(len(t.split()) for t in user) / len(user) > 12
    replies = [e["text"] for r in ext for e in r["input"]["events"] if e["role"] == "assistant"]
    assert len(set(replies)) > len(replies) / 3  # the assistant answers content, not 11 acks


def test_template_split_keeps_held_out_templates_out_of_train(generated):
    from memworker.corpus.templates import T, allowed, held_out, registry

    for key, options in registry().items():
        if len(options) >= 2:
            held = held_out(key, options)
            assert held and len(held) < len(options), key
    fixed = ("story", "user.close", "greet.morning", "greet.afternoon", "greet.evening",
             "reply.chatter", "reply.correction", "reply.secret")
    by_split = {s: " ".join(e["text"] for r in generated[0] if r["task"] == "extract"
                            and r["split"] == s for e in r["input"]["events"]) for s in SPLITS}
    for key in fixed:
        train_only = set(allowed(key, T[key], "train"))
        test_only = set(T[key]) - train_only
        assert not any(t in by_split["test"] or t in by_split["val"] for t in train_only), key
        assert not any(t in by_split["train"] for t in test_only), key


def test_passing_events_carry_relationship_claims_without_first_person(generated):
    claims = [c for r in generated[0] if r["task"] == "extract" for c in r["gold"]["claims"]]
    rel = [c for c in claims if c["kind"] == "relationship"]
    assert rel and all(c["time_expression"] is None for c in rel)
    assert all(not temporal.find_expressions(q) for c in rel for q in c["quotes"])
    assert any(c["predicate"] == "did_with" and c["date"] for c in claims)
    for c in claims:
        assert not re.search(r"\b(?:my|I|me|our)\b", c["statement"]), c["statement"]


def _one_person_ctx(seed: int) -> tuple[Ctx, Person]:
    """An episode context whose family's cast is one person (no pets, no projects)."""
    dom = next(d for d in GENERAL if sum(a.subject == "person" for a in d.attrs) >= 2)
    fam = make_family(f"{dom.key}-00", dom, "train", seed, POOLS_WITH_CODING)
    person = next(p for p in fam.cast if p.kind == "person")
    return Ctx(random.Random(seed), dataclasses.replace(fam, cast=[person]),
               [date(2025, 3, 3)]), person


def test_a_coreference_introduction_labels_its_relationship_once():
    """Corpus 2.2.0: "I ran into my partner Thea." states the relationship as a passing event's
    sentence does: a relationship claim on the canonical name, quoting the smallest candidate
    span of the introduction that names both, and a "Who is Thea?" question; a second
    introduction of the same person in the episode labels nothing more."""
    ctx, person = _one_person_ctx(5)
    first = behaviours.coreference(ctx, 0)
    intro = first.frags[0].sents[0]
    rel = [c for c in first.claims if c.kind == "relationship"]
    assert len(rel) == 1 and len(first.claims) == 2
    (claim,) = rel
    fact = next(c for c in first.claims if c.kind != "relationship")
    assert (claim.subject, claim.subject_type, claim.predicate, claim.value, claim.statement) == (
        person.canon, "person", "relationship", person.rel,
        f"{person.name} is the user's {person.rel}.")
    assert claim.subject == fact.subject and claim.key not in {fact.key, ""}
    quote = claim.quote(0)
    naming = [c for c in candidate_spans(intro) if person.name in c and person.rel in c]
    assert quote in naming and len(quote) == min(map(len, naming))
    assert quote == fact.quote(0)  # every coref.intro template: the whole sentence
    assert first.frags[0].intact == (person.rel,)  # a typo never breaks the relation it quotes
    assert [q.text for q in first.questions][1:] == [f"Who is {person.name}?"]
    assert (person.canon, "relationship") in ctx.used_keys
    second = behaviours.coreference(ctx, 1)  # the same person, another attribute
    assert [(c.subject, c.kind != "relationship") for c in second.claims] == [
        (person.canon, True)]
    assert not second.frags[0].intact and len(second.questions) == 1
    with pytest.raises(LookupError):  # nor does a passing event
        behaviours.passing_event(ctx, 1)


def test_generated_relationship_claims_quote_their_relation_once_per_person(generated):
    """Every person a coreference unit introduces gets the introduction's relationship claim
    (quoting the fact's naming event), no person two, and every relationship claim's quote
    holds its relation word (a typo never lands in it)."""
    labelled = 0
    for r in generated[0]:
        if r["task"] != "extract":
            continue
        rel = [c for c in r["gold"]["claims"] if c["kind"] == "relationship"]
        assert len({c["subject"]["name"] for c in rel}) == len(rel), r["id"]
        assert all(c["value"] in " ".join(c["quotes"]) for c in rel), r["id"]
        by_subject = {c["subject"]["name"]: c for c in rel}
        for t in r["truth"]["facts"]:
            if t.get("behaviour") == "coreference" and t["subject_type"] == "person":
                c = by_subject[t["subject"]]
                assert (c["source_indices"], c["quotes"]) == (
                    t["source_indices"][:1], t["quotes"][:1]), r["id"]
                labelled += 1
    assert labelled >= 10


def test_reflect_and_consolidate_are_not_table_lookups(generated):
    rows = generated[0]
    refl = [r for r in rows if r["task"] == "reflect"]
    assert sum(1 for r in refl if len(r["gold"]["citations"]) >= 2) >= 0.05 * len(refl)
    stamps = [e["timestamp"][11:19] for r in refl for e in r["input"]["evidence"]]
    assert stamps.count("12:00:00") < 0.01 * len(stamps)  # realistic times, not noon
    cons = [r for r in rows if r["task"] == "consolidate"]
    negative = [r for r in cons if not r["gold"]["observations"]
                and r["truth"]["subjects_with_several_facts"]]
    assert negative and any(r["gold"]["observations"] for r in cons)


def test_weekday_words_follow_the_convention():
    from memworker.corpus.calendar import last_gap, next_gap

    for wd in range(7):
        for target in range(7):
            assert 1 <= next_gap(wd, target) <= 7 and 1 <= last_gap(wd, target) <= 7
    rng = random.Random(3)
    for i in range(2000):
        anchor = date(2025, 1, 1) + timedelta(days=rng.randrange(700))
        when = (calendar.future if i % 2 else calendar.past)(anchor, rng)
        if when.words.startswith(("next ", "last ")) and when.words.split()[1] not in (
                "month", "year", "week"):
            gap = abs((date.fromisoformat(when.date) - anchor).days)
            assert 1 <= gap <= 7, when


def test_every_generated_gold_decodes_under_the_codec_schema(generated):
    """Claims per window stay within the dynamic schema's cap for that window (the generator
    redraws an episode that would exceed it), so every gold answer is one the codec accepts."""
    from memworker.corpus.natural import _codec_problems

    bad = {r["id"]: p for r in generated[0] for p in _codec_problems(r)}
    assert not bad, list(bad.items())[:3]
