"""A stage's `wire_contract` (issue 48): the consolidate and reflect rows whose trained answer the
codec does not read back as their gold are left out and counted. The hand-written sets are built
without that check (`audit_row(read_back=False)`), and natural-train's observations and answers
mostly do not state their facts and evidence, so the codec drops or abstains on what they teach
(docs/research/inference-speed.md "Consolidation and reflection weighed up")."""

from __future__ import annotations

import json

from memworker.corpus import load_rows
from memworker.corpus.build import write_manifest
from memworker.hashing import sha256_file
from memworker.train import loop
from memworker.train.config import LATER_DEFAULTS, StageConfig
from tests.fixtures.tiny import build_tiny_corpus


def _unreadable(corpus, split="train"):
    """Rewrite one observation row's and one answered reflection's answer in `corpus`'s wire
    split to text that states no fact and no evidence (as a hand-written label may), resealed;
    their ids."""
    gold = {r["id"]: r["gold"] for r in load_rows(corpus, split, form="canonical")}
    path = corpus / "wire" / f"{split}.jsonl"
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    cons = next(r for r in rows if r["task"] == "consolidate" and gold[r["id"]]["observations"])
    refl = next(r for r in rows if r["task"] == "reflect"
                and not gold[r["id"]]["insufficient_evidence"])
    cons["messages"][-1]["content"] = '{"observations":["The user seems to keep busy."]}'
    refl["messages"][-1]["content"] = '{"answer":"Yes, that one."}'
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    manifest = json.loads((corpus / "manifest.json").read_text("utf-8"))
    manifest["files"][f"wire/{split}.jsonl"] = sha256_file(path)
    write_manifest(corpus, manifest)
    return cons["id"], refl["id"]


def test_rows_the_codec_does_not_read_back_are_left_out_and_counted(tmp_path):
    main = build_tiny_corpus(tmp_path / "main", episodes=6)
    other = build_tiny_corpus(tmp_path / "other", domain="coding", episodes=6)
    bad = _unreadable(other)
    base = dict(name="t", corpus=str(main), mix_corpus=str(other), mix_share=0.5)
    plain = loop.prepare_data(StageConfig(**base))
    kept = loop.prepare_data(StageConfig(**base, wire_contract=True))
    assert set(bad) <= {r["id"] for r in plain["train"]}          # trained without the setting
    assert not set(bad) & {r["id"] for r in kept["train"]}
    assert kept["provenance"]["mix"]["wire_contract_left_out"] == {"consolidate": 1, "reflect": 1}
    assert kept["provenance"]["wire_contract"] == {"left_out": {}}  # the generated corpus reads back
    assert "wire_contract" not in plain["provenance"]
    assert "wire_contract_left_out" not in plain["provenance"]["mix"]
    # every other row of the mix corpus is still there; the stage's own rows are unchanged
    others = {r["id"] for r in plain["train"]} - set(bad)
    assert others == {r["id"] for r in kept["train"]}
    own = {r["id"] for r in load_rows(main, "train", form="canonical")}
    assert [r for r in kept["train"] if r["id"] in own] == \
        [r for r in plain["train"] if r["id"] in own]


def test_wire_contract_is_a_later_default_so_earlier_configs_hash_alike():
    assert LATER_DEFAULTS["wire_contract"] is False
    assert "wire_contract" not in StageConfig(name="t").to_dict()
    assert StageConfig(name="t", wire_contract=True).to_dict()["wire_contract"] is True
