"""train/diagnose.py on the tiny local base and a tiny corpus: the fork token of an extract
answer, the probabilities of both branches, the summary, and the refusals."""

from __future__ import annotations

import json

import pytest

from memworker.train import diagnose as D


@pytest.fixture(scope="module")
def tiny(assets):
    return assets["base"], assets["general"]


def test_branch_tokens_fork_where_the_answers_differ(tiny):
    from transformers import AutoTokenizer

    base, _ = tiny
    tok = AutoTokenizer.from_pretrained(base)
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                     add_generation_prompt=True)
    ids, open_id, close_id = D.branch_tokens(tok, prompt)
    assert open_id != close_id
    opened = tok(prompt + D.OPEN, add_special_tokens=False)["input_ids"]
    closed = tok(prompt + D.CLOSE, add_special_tokens=False)["input_ids"]
    assert opened[:len(ids)] == closed[:len(ids)] == ids
    assert tok.decode(ids).endswith(D.PREFIX)


def test_probabilities_and_summary(tiny, tmp_path, capsys):
    base, corpus = tiny
    out = tmp_path / "d.json"
    assert D.main(["--base", str(base), "--corpus", str(corpus), "--split", "train",
                   "--rows", "2", "--json", str(out)]) == 0
    found = json.loads(out.read_text())
    rows = found["rows"]
    assert len(rows) == 2
    for r in rows:
        assert 0 <= r["p_open"] <= 1 and 0 <= r["p_close"] <= 1
        assert r["p_open"] + r["p_close"] <= 1.0001
    s = found["summary"]
    assert s["rows_with_claims"]["rows"] + s["rows_without_claims"]["rows"] == 2
    assert s["rows_with_claims"]["greedy_empty"] == sum(
        r["p_close"] > r["p_open"] for r in rows if not r["gold_empty"])
    printed = capsys.readouterr().out
    assert "train split, 2 extract rows" in printed


def test_refusals(tiny, tmp_path, capsys):
    base, corpus = tiny
    assert D.main(["--base", str(base), "--corpus", str(corpus), "--split", "test"]) == 2
    assert "for evaluation only" in capsys.readouterr().err
    assert D.main(["--run", str(tmp_path / "nowhere"), "--corpus", str(corpus)]) == 2
    assert "not a finished stage run" in capsys.readouterr().err


def test_answer_lengths(tiny, tmp_path, capsys):
    from transformers import AutoTokenizer

    base, corpus = tiny
    out = tmp_path / "lengths.json"
    assert D.main(["--lengths", "--base", str(base), "--corpus", str(corpus), "--split", "train",
                   "--rows", "0", "--cap", "20", "--json", str(out)]) == 0
    found = json.loads(out.read_text())
    assert set(found) == {"extract", "consolidate", "reflect"}
    tok = AutoTokenizer.from_pretrained(base)
    from memworker.train import data as tdata

    rows = tdata.load_wire_rows(corpus, "train")
    extract = sorted(len(tok(r["messages"][-1]["content"], add_special_tokens=False)["input_ids"])
                     for r in rows if r["task"] == "extract")
    assert found["extract"]["rows"] == len(extract)
    assert found["extract"]["max"] == extract[-1]
    assert found["extract"]["over_cap"] == sum(n > 20 for n in extract)
    assert f"train extract: {len(extract)} rows" in capsys.readouterr().out
    assert D.main(["--lengths", "--base", str(base), "--corpus", str(corpus),
                   "--split", "test"]) == 2
