"""scripts/subset_corpus.py: the overfit check's corpus (train rows only, verified, bytes kept)."""

import importlib.util
import json
from pathlib import Path

import pytest

from memworker.corpus import load_rows, verify_corpus
from tests.fixtures.tiny import build_tiny_corpus

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("subset_corpus", ROOT / "scripts/subset_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_subset_holds_the_chosen_train_rows_in_every_split(tmp_path):
    mod = _module()
    src = build_tiny_corpus(tmp_path / "corpus")
    ids = mod.subset(src, tmp_path / "sub", "extract", rows=3, min_claims=1)
    train = load_rows(src, "train")
    lines = {json.loads(x)["id"]: x for x in (src / "wire/train.jsonl").read_text().splitlines()}
    expected = [r["id"] for r in train if r["task"] == "extract" and mod.n_claims(r) >= 1][:3]
    assert ids == expected and len(ids) == 3
    manifest = verify_corpus(tmp_path / "sub")
    assert manifest["subset_of"]["ids"] == ids
    for split in ("train", "val", "test"):
        got = (tmp_path / "sub" / f"wire/{split}.jsonl").read_text().splitlines()
        assert got == [lines[i] for i in ids]  # the source rows byte for byte
        assert [r["id"] for r in load_rows(tmp_path / "sub", split, form="canonical")] == ids
    # the subset is a corpus like any other: a changed byte is refused
    path = tmp_path / "sub" / "wire/val.jsonl"
    path.write_text(path.read_text().replace('"extract"', '"extracT"', 1))
    with pytest.raises(ValueError, match="sha256 mismatch"):
        verify_corpus(tmp_path / "sub")


def test_subset_refuses_when_no_row_matches(tmp_path):
    mod = _module()
    src = build_tiny_corpus(tmp_path / "corpus")
    with pytest.raises(SystemExit, match="no extract train rows"):
        mod.subset(src, tmp_path / "sub", "extract", rows=3, min_claims=99)
