"""The hand-written natural set (corpus/natural, issue 11 item 5): every row passes the corpus audit
as written, its gold survives the wire form and the codec, and the freeze is hashed, verifiable
and byte-identical across builds."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from memworker import wire
from memworker.corpus import (
    BEHAVIOURS,
    CorpusIntegrityError,
    audit_row,
    load_rows,
    verify_corpus,
)
from memworker.corpus.cli import main as cli_main
from memworker.corpus.natural import (
    NaturalSetError,
    build_natural,
    load_conversation,
    load_natural,
)
from memworker.inference import codec

SOURCE = Path(__file__).resolve().parents[1] / "corpus" / "natural"


@pytest.fixture(scope="module")
def rows():
    found, _ = load_natural(SOURCE)
    return found


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    out = tmp_path_factory.mktemp("natural") / "data"
    manifest = build_natural(SOURCE, out, count_tokens=False)
    return out, manifest


def test_every_row_passes_the_audit_without_repair(rows):
    """Hand labels need not state their ids in their own words (read_back=False): the codec
    reads a model's ids from its text, and on this set that is measured, not a label error."""
    assert rows
    bad = {r["id"]: [str(v) for v in vs] for r in rows
           if (vs := audit_row(r, read_back=False))}
    assert bad == {}


def _answer(row):
    """The gold as an arm would write it: extract in the wire form, consolidate and reflect in
    the canonical form, ids given (wire v4 has none: hand-written text need not state them)."""
    if row["task"] == "extract":
        return wire.dump_answer(row["task"], wire.to_wire(row["task"], row["gold"]))
    return json.dumps(row["gold"], ensure_ascii=False)


def test_gold_converts_through_wire_and_decodes_through_the_codec(rows):
    for r in rows:
        result = codec.decode(r["task"], r["input"], _answer(r))
        # the codec derives the statement and the confidence
        assert wire.comparable_answer(r["task"], result.output) == wire.comparable_answer(
            r["task"], r["gold"]), r["id"]
        notes = [d for d in result.diagnostics if not d.startswith(codec.CANONICAL_FORM)]
        assert notes == [], (r["id"], notes)


def test_the_evaluators_grader_gives_the_gold_full_credit(frozen):
    """An arm that wrote the gold (`_answer`, through the codec) would score every metric in
    full on the natural set: a zero in the results (no arm's claim supported) is the arms', not
    the grader's against these rows."""
    from memworker.eval import grade, runner

    out, _ = frozen
    totals: dict[tuple[str, str], list[float]] = {}
    for r in runner.load_eval_rows(out, "natural"):
        decoded = codec.decode(r["task"], r["input"], _answer(r)).output  # what such an arm stores
        verdict = grade.grade(r, status="first_try", output=decoded)
        for metric, (num, den) in verdict["metrics"].items():
            t = totals.setdefault((r["task"], metric), [0, 0])
            t[0], t[1] = t[0] + num, t[1] + den
    # every metric in full but coverage over all facts: the facts marked out of vocabulary are
    # graded, and no contract-valid answer (the gold's included) can state them
    oov = sum(1 for r in runner.load_eval_rows(out, "natural") if r["task"] == "extract"
              for t in r["truth"]["facts"] if t.get("in_vocabulary") is False)
    assert {k: tuple(v) for k, v in totals.items() if v[0] != v[1]} == {
        ("extract", "extract_coverage"): (totals[("extract", "extract_coverage")][1] - oov,
                                          totals[("extract", "extract_coverage")][1])}
    assert oov > 0 and totals[("extract", "extract_coverage_in_vocab")][0] == \
        totals[("extract", "extract_coverage_in_vocab")][1]
    assert totals[("extract", "extract_support")][1] >= 150  # claims were graded, not none
    assert {task for task, _ in totals} == {"extract", "consolidate", "reflect"}


def test_rows_have_the_corpus_canonical_format(rows):
    keys = {"id", "task", "split", "domain", "family", "episode", "behaviours", "input", "gold",
            "truth"}
    for r in rows:
        assert set(r) == keys, r["id"]
        assert r["split"] == "test"
        assert r["family"] == f"natural-{r['episode']}"


def test_size_tasks_and_hard_cases(rows):
    assert len(list(SOURCE.glob("*.yaml"))) >= 40
    tasks = Counter(r["task"] for r in rows)
    assert all(tasks[t] >= 10 for t in ("extract", "consolidate", "reflect")), tasks
    extract = [r for r in rows if r["task"] == "extract"]
    reflect = [r for r in rows if r["task"] == "reflect"]
    empty = sum(1 for r in extract if not r["gold"]["claims"])
    assert empty / len(extract) >= 0.10
    insufficient = sum(1 for r in reflect if r["gold"]["insufficient_evidence"])
    assert 0.25 <= insufficient / len(reflect) <= 0.5
    assert sum(1 for r in reflect if len(r["gold"]["citations"]) > 1) >= 10
    assert any(not r["gold"]["observations"] for r in rows if r["task"] == "consolidate")
    kinds = Counter(c["kind"] for r in extract for c in r["gold"]["claims"])
    assert all(kinds[k] for k in ("fact", "preference", "plan", "event", "belief",
                                  "relationship", "retraction")), kinds
    behaviours = {b for r in rows for b in r["behaviours"]}
    assert behaviours == set(BEHAVIOURS), set(BEHAVIOURS) - behaviours
    assert len({r["domain"] for r in rows}) == 17


def test_freeze_verifies_and_loads_like_a_corpus(frozen, rows):
    out, manifest = frozen
    assert verify_corpus(out)["manifest_sha256"] == manifest["manifest_sha256"]
    loaded = load_rows(out, "test", form="canonical")
    assert [r["id"] for r in loaded] == [r["id"] for r in rows]
    assert loaded == json.loads(json.dumps(rows))
    wire_rows = load_rows(out, "test", form="wire")
    assert [m["role"] for m in wire_rows[0]["messages"]] == ["system", "user", "assistant"]
    assert manifest["hand_written"] is True and manifest["splits"] == ["test"]
    assert manifest["totals"]["rows"] == len(rows)
    assert manifest["conversations"] == len(list(SOURCE.glob("*.yaml")))
    assert manifest["audit"]["rows_with_violations"] == 0
    assert manifest["audit"]["repaired_from_truth"] == 0


def test_there_is_no_training_split_to_read(frozen):
    out, manifest = frozen
    assert set(manifest["files"]) == {"canonical/test.jsonl", "wire/test.jsonl"}
    for split in ("train", "val"):
        with pytest.raises(OSError):
            load_rows(out, split, form="wire")


def test_two_freezes_are_byte_identical(frozen, tmp_path):
    out, _ = frozen
    again = tmp_path / "again"
    build_natural(SOURCE, again, count_tokens=False)
    for rel in ("manifest.json", "canonical/test.jsonl", "wire/test.jsonl"):
        assert (out / rel).read_bytes() == (again / rel).read_bytes(), rel


def test_verify_catches_an_edited_row(frozen, tmp_path):
    out, _ = frozen
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    path = copy / "canonical" / "test.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"insufficient_evidence":true',
                                               b'"insufficient_evidence":false', 1))
    with pytest.raises(CorpusIntegrityError, match="canonical/test.jsonl"):
        verify_corpus(copy)


def _copy_with(tmp_path: Path, old: str, new: str) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    name = "n01-flat-move.yaml"
    text = (SOURCE / name).read_text("utf-8")
    assert old in text
    (src / name).write_text(text.replace(old, new, 1), "utf-8")
    return src


@pytest.mark.parametrize("old,new,expect", [
    # a quote that is not an exact span of its event
    ('[[7, "so KPN fibre it is."]]', '[[7, "so KPN fibre it was."]]', "quote_not_in_event"),
    # a hand date that disagrees with the resolver
    ('date: "2025-02-03"', 'date: "2025-02-04"', "date_mismatch"),
    # a rejected option stored after all
    ('value: "KPN fibre"', 'value: "Ziggo"', "negated_option_claimed"),
])
def test_builder_refuses_a_wrong_label_and_names_the_file(tmp_path, old, new, expect):
    src = _copy_with(tmp_path, old, new)
    with pytest.raises(NaturalSetError, match=expect) as info:
        build_natural(src, tmp_path / "out", count_tokens=False)
    assert "n01-flat-move.yaml" in str(info.value)
    assert not (tmp_path / "out").exists()


def test_loader_keeps_timestamps_as_strings_and_defaults_trust():
    conv = load_conversation(SOURCE / "n01-flat-move.yaml")
    assert conv["events"][0]["timestamp"] == "2025-02-11T20:14:00+01:00"
    assert all(e["trusted"] == (e["role"] != "tool") for e in conv["events"])


def test_cli_builds_verifies_and_audits(tmp_path, capsys):
    out = tmp_path / "nat"
    assert cli_main(["--natural", str(SOURCE), "--out", str(out), "--no-tokens"]) == 0
    assert cli_main(["--verify", str(out)]) == 0
    assert cli_main(["--audit", str(out)]) == 0
    assert "rows with violations  0" in capsys.readouterr().out


@pytest.mark.slow
def test_default_build_counts_tokens_with_the_embedded_tokenizer(tmp_path):
    """The CLI default (token counting on) names the tokenizer by sha256 and bounds prompts."""
    manifest = build_natural(SOURCE, tmp_path / "out", count_tokens=True)
    tokens = manifest["tokens"]
    assert len(tokens["tokenizer"]["gguf_sha256"]) == 64
    assert 0 < tokens["extract"]["max_prompt"] <= tokens["max_prompt_allowed"]
