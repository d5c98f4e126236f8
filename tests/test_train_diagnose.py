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
    assert found["extract"]["tokens"] == sum(extract)
    assert abs(sum(f["share"] for f in found.values()) - 1) < 1e-3
    assert f"train extract: {len(extract)} rows" in capsys.readouterr().out
    assert D.main(["--lengths", "--base", str(base), "--corpus", str(corpus),
                   "--split", "test"]) == 2


def test_field_of_and_value_starts():
    answer = ('{"claims":[[[["I moved.",3]],"the user","person","lives_in","Porto","fact",null,'
              '[]]]}')
    # token start offsets of a made-up tokenisation
    pieces = ['{"claims":', '[[[', '["', "I", " moved.", '",', "3", ']],"', "the user", '","',
              "person", '","', "lives", "_in", '","', "Porto", '","', "fact", '",', "null", ",[",
              "]]]}"]
    assert "".join(pieces) == answer
    offsets = [sum(len(p) for p in pieces[:k]) for k in range(len(pieces))] + [len(answer)]
    fields = D.field_of(answer, offsets)
    assert fields[3] == fields[4] == "quote" and fields[6] == "event" and fields[8] == "name"
    assert fields[12] == fields[13] == "predicate" and fields[15] == "value"
    assert fields[0] == "" and fields[-1] == "end"
    assert value_starts(answer, offsets) == {
        1: "quotes", 2: "pair", 3: "quote", 6: "event", 8: "name", 10: "type", 12: "predicate",
        15: "value", 17: "kind", 19: "time_expression", 20: "supersedes"}
    # the training weights' decision fields: the fork (the "[" token and the one after it; here
    # one token), the quoted span, name, predicate, value, kind and the supersedes list and its
    # first item; not the event index, the subject type or the time expression
    assert value_starts(answer, offsets, DECISION_FIELDS) == {
        1: "claims", 3: "quote", 8: "name", 12: "predicate", 15: "value", 17: "kind",
        20: "supersedes", 21: "supersedes"}


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


def test_labelled_json_is_the_training_target_and_labels_each_field():
    from memworker import wire
    from memworker.train import anatomy

    claim = {"source_indices": [2], "quotes": ["I moved to Porto."],
             "subject": {"name": "the user", "type": "person"}, "predicate": "lives_in",
             "value": "Porto", "statement": "The user lives in Porto.", "kind": "fact",
             "time_expression": None, "date": None, "date_precision": None,
             "is_correction": False, "supersedes": [], "confidence": 0.9}

    def labels(pieces):
        by_label: dict[str, str] = {}
        for text, label in pieces:
            by_label[label] = by_label.get(label, "") + text
        return by_label

    # today's wire (v3): the training target, byte for byte
    answer = wire.to_wire("extract", {"claims": [claim]})
    pieces = anatomy.labelled_json(answer, separators=wire.SEPARATORS)
    assert "".join(t for t, _ in pieces) == wire.dump_answer("extract", answer)
    got = labels(pieces)
    assert got["quote"] == "I moved to Porto." and got["event"] == "2"
    assert got["name"] == "the user" and got["type"] == "person"
    assert got["predicate"] == "lives_in" and got["value"] == "Porto" and got["kind"] == "fact"
    assert got["time_expression"] == "null" and "statement" not in got
    assert got["keys"].startswith('{"claims":[[[["')
    # the wire before v3: keyed, spaced, with the fields the codec now derives
    got = labels(anatomy.labelled_json({"claims": [anatomy.v2_claim(claim)]}))
    assert got["statement"] == "The user lives in Porto." and got["confidence"] == "high"
    assert got["correction"] == "false" and "supersedes" not in got
    assert got["keys"].startswith('{"claims": [{"quotes": [{"quote": "')
    # the levers render the same claim shorter, each no longer than the one before; lever 4 is
    # the training target
    row = {"gold": {"claims": [claim]}}
    texts = [anatomy.render(row, lever) for lever in anatomy.LEVERS]
    assert [len(t) for t in texts] == sorted((len(t) for t in texts), reverse=True)
    assert texts[4] == wire.dump_answer("extract", answer)
    from memworker.textnorm import bare_name

    assert bare_name("Uma (the user's client)") == "Uma"


def test_anatomy_counts_every_answer_token_once(tiny, tmp_path, capsys):
    from transformers import AutoTokenizer

    from memworker.corpus.build import load_rows

    base, corpus = tiny
    out = tmp_path / "anatomy.json"
    assert D.main(["--anatomy", "--base", str(base), "--corpus", str(corpus), "--split", "train",
                   "--rows", "0", "--json", str(out)]) == 0
    found = json.loads(out.read_text())
    tok = AutoTokenizer.from_pretrained(base)
    rows = [r for r in load_rows(corpus, "train", "canonical") if r["task"] == "extract"]
    from memworker import wire

    gold = [len(tok(wire.dump_answer("extract", wire.to_wire("extract", r["gold"])),
                    add_special_tokens=False)["input_ids"]) for r in rows]
    assert sum(found["field_tokens"]["v3"].values()) == sum(gold)
    assert found["levers"][4]["median"] == sorted(gold)[len(gold) // 2]
    assert found["claims"] == sum(len(r["gold"]["claims"]) for r in rows)
    k, n = found["choices"]["subject_is_the_user_or_a_name_in_the_window"]
    assert n == found["claims"] and 0 <= k <= n
    whole, quotes = found["choices"]["quote_is_a_whole_sentence_of_its_event"]
    inside, quotes2 = found["choices"]["quote_lies_in_one_sentence_of_its_event"]
    assert quotes == quotes2 == sum(len(c["quotes"]) for r in rows for c in r["gold"]["claims"])
    assert 0 < whole <= inside <= quotes
    assert found["designs"]["b_answer_per_window"]["n"] == len(rows)
    assert "share per field" in capsys.readouterr().out
    assert D.main(["--anatomy", "--base", str(base), "--corpus", str(corpus),
                   "--split", "test"]) == 2
