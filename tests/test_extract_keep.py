"""Training on what the student gets right (issue 48): the keep file
(`memworker.eval.studies.keep_facts`) and a stage's `extract_keep`
(`memworker.train.loop.prepare_data`): listed windows keep their listed gold facts only, unlisted
extract windows are left out, everything else is unchanged, and a wrong file is refused."""

from __future__ import annotations

import json

import pytest

from memworker.eval.cli import main as eval_main
from memworker.eval.runner import EvalError, grade_sample
from memworker.eval.studies import keep_facts
from memworker.eval.studies.rowtools import read_folder
from memworker.train import data as tdata
from memworker.train import loop
from memworker.train.config import ConfigError, StageConfig
from tests.fixtures.tiny import build_tiny_corpus


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("keep")
    return build_tiny_corpus(root / "main", episodes=6), build_tiny_corpus(
        root / "other", domain="coding", episodes=3), root


def _rules_folder(corpus, out, split="train"):
    assert eval_main(["--arm", "rules", "--set", split, "--corpus", str(corpus), "--task",
                      "extract", "--out", str(out), "--no-progress", "--no-plots"]) == 0
    return out


def _answers(rows):
    return {r["id"]: json.loads(r["messages"][-1]["content"])["claims"] for r in rows
            if r["task"] == "extract"}


def test_the_keep_file_lists_what_the_recorded_claims_cover_on_train_splits_only(corpora,
                                                                                  tmp_path):
    main, _, _ = corpora
    folder = _rules_folder(main, tmp_path / "rules-train")
    keep = keep_facts.build([(folder, "rules")], "supported")
    _, rows, samples = read_folder(folder)
    by_id = {s["id"]: s for s in samples}
    extract = [r for r in rows if r["task"] == "extract"]
    [(sha, listed)] = keep["corpora"].items()
    assert sha == keep["sources"][0]["manifest_sha256"]
    assert sorted(listed) == sorted(r["id"] for r in extract)
    for r in extract:
        assert listed[r["id"]] == sorted(grade_sample(r, by_id[r["id"]])["facts_covered"])
    assert 0 < keep["sources"][0]["facts"] < keep["sources"][0]["of"]  # the rules miss some
    # the same folder twice, or a folder of another set, is refused
    with pytest.raises(EvalError, match="listed by another folder too"):
        keep_facts.build([(folder, "rules"), (folder, "rules")], "supported")
    val = _rules_folder(main, tmp_path / "rules-val", "val")
    with pytest.raises(EvalError, match="set 'val'.*train splits only"):
        keep_facts.build([(val, "rules")], "supported")
    with pytest.raises(EvalError, match="no samples of arm 'student'"):
        keep_facts.build([(folder, "student")], "supported")
    out = tmp_path / "keep.json"
    assert keep_facts.main(["--folder", f"{folder}:rules", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == keep


def test_a_stage_trains_listed_windows_on_their_listed_facts_and_leaves_the_rest_out(corpora,
                                                                                    tmp_path):
    main, other, _ = corpora
    sha = loop.report.file_sha(main / "manifest.json")
    train = {r["id"]: r for r in tdata.load_wire_rows(main, "train")}
    gold = _answers(train.values())
    with_facts = [i for i, claims in gold.items() if len(claims) >= 2]
    assert len(with_facts) >= 2
    listed = {with_facts[0]: [1], with_facts[1]: []}
    path = tmp_path / "keep.json"
    path.write_text(json.dumps({"kind": keep_facts.KIND, "corpora": {sha: listed}}))
    plain = loop.prepare_data(StageConfig(name="t", corpus=str(main), mix_corpus=str(other),
                                          mix_share=0.5))
    cfg = StageConfig(name="t", corpus=str(main), mix_corpus=str(other), mix_share=0.5,
                      extract_keep=str(path))
    kept = loop.prepare_data(cfg)
    got = _answers(r for r in kept["train"] if r["id"] in train)
    assert got == {with_facts[0]: [gold[with_facts[0]][1]], with_facts[1]: []}
    others = [r for r in kept["train"] if r["task"] != "extract" and r["id"] in train]
    assert sorted(r["id"] for r in others) == sorted(
        r["id"] for r in plain["train"] if r["task"] != "extract" and r["id"] in train)
    # the mix corpus the file does not name, and val, are unchanged
    mixed = [json.dumps(r, sort_keys=True) for r in plain["train"] if r["id"] not in train]
    assert all(json.dumps(r, sort_keys=True) in mixed
               for r in kept["train"] if r["id"] not in train)
    assert kept["val"] == plain["val"]
    prov = kept["provenance"]
    assert prov["extract_keep"]["sha256"] == loop.report.file_sha(path)
    assert prov["keep"][str(main)] == {
        "listed": True, "windows": 2, "windows_left_out": len(gold) - 2, "facts": 1,
        "facts_dropped": len(gold[with_facts[0]]) - 1 + len(gold[with_facts[1]])}
    assert prov["keep"][str(other)] == {"listed": False}


@pytest.mark.parametrize("doc, match", [
    ({"kind": "other", "corpora": {}}, "is not a keep file"),
    ("stray", "no train extract row of"),
    ("index", r"not distinct fact indices below"),
])
def test_a_wrong_keep_file_is_refused(corpora, tmp_path, doc, match):
    main, _, _ = corpora
    sha = loop.report.file_sha(main / "manifest.json")
    val_id = next(r["id"] for r in tdata.load_wire_rows(main, "val") if r["task"] == "extract")
    train_id = next(r["id"] for r in tdata.load_wire_rows(main, "train")
                    if r["task"] == "extract")
    if doc == "stray":      # a val window: never trained on
        doc = {"kind": keep_facts.KIND, "corpora": {sha: {val_id: []}}}
    elif doc == "index":
        doc = {"kind": keep_facts.KIND, "corpora": {sha: {train_id: [99]}}}
    path = tmp_path / "keep.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(loop.RunError, match=match):
        loop.prepare_data(StageConfig(name="t", corpus=str(main), extract_keep=str(path)))
    with pytest.raises(loop.RunError, match="does not exist"):
        loop.prepare_data(StageConfig(name="t", corpus=str(main),
                                      extract_keep=str(tmp_path / "none.json")))
    with pytest.raises(ConfigError, match="extract_keep and merged_days"):
        StageConfig(name="t", extract_keep="k.json", merged_days=0.5).validate()
