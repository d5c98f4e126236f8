"""Corpus stage, slow tier: the embedded tokenizer and a real llama.cpp teacher server."""

from __future__ import annotations

import json

import pytest

from memworker.corpus import audit_corpus, build_corpus, load_rows
from memworker.corpus.build import wire_row
from memworker.hashing import sha256_file
from tests.test_corpus_tables import CHANGED, DEFAULT_MANIFEST_SHA256, build_default

pytestmark = pytest.mark.slow


def test_token_counts_enforce_the_limit(tmp_path, embedded_gguf):
    from memworker.corpus import tokens

    m = build_corpus(tmp_path / "c", seed=21, episodes=96, count_tokens=True)
    assert m["tokens"]["tokenizer"] == {"base": "smollm2-135m",
                                        "gguf_sha256": sha256_file(embedded_gguf)}
    for s in ("train", "val", "test"):
        stats = m["tokens"][s]
        assert 0 < stats["mean_prompt"] < stats["mean_total"] <= stats["max_total"]
        assert stats["max_total"] <= tokens.MAX_TOKENS
        assert stats["max_prompt"] <= tokens.MAX_PROMPT_TOKENS
    rows = load_rows(tmp_path / "c", "train", form="canonical")
    counted = tokens.count([wire_row(r)["messages"] for r in rows])
    assert max(total for _, total in counted) == m["tokens"]["train"]["max_total"]
    assert all(prompt < total for prompt, total in counted)
    # an over-long row is excluded, not truncated
    assert all(reason == "too_long" for reason in m["exclusions"]["by_reason"]) or not m[
        "exclusions"]["by_reason"]


def test_teacher_paraphrases_pass_the_same_audit(llama_server, tmp_path):
    out = tmp_path / "t"
    m = build_corpus(out, seed=3, episodes=24, count_tokens=False, teacher=llama_server + "/v1",
                     teacher_model="smollm2", teacher_max_rows=5)
    report = m["teacher"]
    assert report["rows_sent"] == 5 and report["served_models"]
    outcomes = report["event_outcomes"]
    assert sum(outcomes.values()) > 0  # the server answered, every event has an outcome
    assert report["rows_paraphrased"] + sum(report["rows_restored_after_audit"].values()) <= 5
    audit = audit_corpus(out)
    assert audit["rows_with_violations"] == 0 and audit["heldout_ok"]
    assert json.loads((out / "manifest.json").read_text())["args"]["teacher"] == \
        llama_server + "/v1"


@pytest.mark.parametrize("domain", ["general", "coding"])
def test_the_default_corpora_rebuild_to_their_recorded_manifests(domain, embedded_gguf, tmp_path,
                                                                  monkeypatch):
    """Issue 49 item 4: `python corpus/build.py --out DIR --seed 13 [--domain coding]`, token
    counts included, gives the manifest it gave when the tables were Python (about 45 s each)."""
    sha = build_default(tmp_path / domain, domain, True, monkeypatch)
    assert sha == DEFAULT_MANIFEST_SHA256[domain]["tokens"], f"the {domain} corpus {CHANGED}"
