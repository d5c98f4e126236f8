"""train/diagnose.py on the tiny local base and a tiny corpus: the fork token of an extract
answer, the probabilities of both branches, the summary, and the refusals."""

from __future__ import annotations

import json

import pytest

from memworker.train import diagnose as D
from memworker.train.data import DECISION_FIELDS, value_starts


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


def test_field_of_and_value_starts():
    answer = '{"claims": [{"quotes": [{"quote": "I moved.", "event": 3}], "predicate": "lives_in"}]}'
    # token start offsets of a made-up tokenisation: '{"claims": [{"' 'quotes": [{"' 'quote": "'
    # 'I' ' moved.' '", "' 'event": ' '3' '}], "' 'predicate": "' 'lives' '_in' '"}]}' end
    pieces = ['{"claims": [{"', 'quotes": [{"', 'quote": "', "I", " moved.", '", "', 'event": ',
              "3", '}], "', 'predicate": "', "lives", "_in", '"}]}']
    assert "".join(pieces) == answer
    offsets = [sum(len(p) for p in pieces[:k]) for k in range(len(pieces))] + [len(answer)]
    fields = D.field_of(answer, offsets)
    assert fields[3] == fields[4] == "quote" and fields[7] == "event"
    assert fields[10] == fields[11] == "predicate" and fields[-1] == "end"
    assert value_starts(answer, offsets) == {0: "claims", 1: "quotes", 3: "quote", 7: "event",
                                             10: "predicate"}
    # the training weights' decision fields: the fork (the "[" token and the one after it; here
    # one token), the quoted span and the predicate, not the event index or the list of quotes
    assert value_starts(answer, offsets, DECISION_FIELDS) == {0: "claims", 3: "quote",
                                                              10: "predicate"}


def test_fields_mode_counts_every_answer_token(tiny, tmp_path, capsys):
    from transformers import AutoTokenizer

    from memworker.train import data as tdata

    base, corpus = tiny
    out = tmp_path / "fields.json"
    assert D.main(["--fields", "--base", str(base), "--corpus", str(corpus), "--split", "train",
                   "--rows", "2", "--json", str(out)]) == 0
    fields = json.loads(out.read_text())["fields"]
    tok = AutoTokenizer.from_pretrained(base)
    rows = [r for r in tdata.load_wire_rows(corpus, "train") if r["task"] == "extract"][:2]
    n = sum(tdata.encode_chat(tok, r["messages"], 1 << 20, "<|im_end|>").n_answer for r in rows)
    assert sum(f["tokens"] for f in fields.values()) == n
    for f in fields.values():
        assert 0 <= f["right"] <= f["tokens"] and f["first_right"] <= f["first"]
    assert "answer tokens right teacher-forced" in capsys.readouterr().out
