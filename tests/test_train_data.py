"""Answer-only labels, exclusions, batching and corpus checks of memworker.train.data."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from memworker import wire
from memworker.prompts import system_prompt
from memworker.train import data as tdata
from tests.fixtures.tiny import build_tiny_corpus, build_tokenizer

EOT = "<|im_end|>"
ANSWER = json.dumps({"claims": [{"quotes": [{"event": 0, "quote": "I moved to Lisbon"}],
                                 "value": "Lisbon", "correction": True}]})


def chat(answer: str = ANSWER, user: str = "TASK: extract\nEvents:\n[0] user: I moved to Lisbon."):
    return [{"role": "system", "content": system_prompt()}, {"role": "user", "content": user},
            {"role": "assistant", "content": answer}]


@pytest.fixture(scope="module")
def tiny_tok(tmp_path_factory):
    return build_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def smol_tok(embedded_gguf):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(embedded_gguf.parent, gguf_file=embedded_gguf.name)


def _check_mask(tok, messages):
    enc = tdata.encode_chat(tok, messages, 4096, EOT)
    labelled = [i for i, x in enumerate(enc.labels) if x != tdata.IGNORE]
    start = labelled[0]
    # labels are one contiguous run from the first answer token to the end (the end-of-turn token)
    assert labelled == list(range(start, len(enc.input_ids)))
    assert all(x == tdata.IGNORE for x in enc.labels[:start])
    assert [enc.input_ids[i] for i in labelled] == [enc.labels[i] for i in labelled]
    assert tok.decode([enc.labels[i] for i in labelled]) == messages[-1]["content"] + EOT
    assert enc.input_ids[-1] == tok.convert_tokens_to_ids(EOT)
    prompt = tok.apply_chat_template(messages[:-1], add_generation_prompt=True, tokenize=False)
    assert tok.decode(enc.input_ids[:start]) == prompt  # exactly the prompt is masked
    return enc


def test_labels_cover_exactly_the_answer_and_end_of_turn(tiny_tok):
    enc = _check_mask(tiny_tok, chat())
    assert enc.n_answer == len(tiny_tok(ANSWER)["input_ids"]) + 1


def test_labels_on_the_embedded_tokenizer(smol_tok):
    _check_mask(smol_tok, chat())
    _check_mask(smol_tok, chat('{"claims": []}'))
    _check_mask(smol_tok, chat('{"answer": "Ünïcode — ok", "citations": [], '
                               '"insufficient_evidence": true}', user="TASK: reflect\n{x}"))


def test_long_rows_are_excluded_and_counted_never_truncated(tiny_tok):
    short, long_ = chat(), chat(user="TASK: extract\n" + "word " * 3000)
    rows = [{"id": "a", "messages": short}, {"id": "b", "messages": long_}]
    full = len(tiny_tok.apply_chat_template(long_, tokenize=True, return_dict=False))
    encoded, stats = tdata.encode_rows(tiny_tok, rows, 1024, EOT)
    assert [e.source for e in encoded] == [0] and stats.rows == 1
    assert stats.excluded == {"too_long": 1} and stats.longest_excluded == full - 1
    assert stats.to_dict()["tokens_total"] == len(encoded[0].input_ids) == stats.max_tokens
    assert stats.answer_tokens == encoded[0].n_answer


def test_rows_without_our_system_prompt_or_answer_are_refused(tiny_tok):
    with pytest.raises(tdata.DataError, match="system prompt"):
        tdata.encode_chat(tiny_tok, chat()[1:], 4096, EOT)
    with pytest.raises(tdata.DataError, match="assistant"):
        tdata.encode_chat(tiny_tok, chat()[:2], 4096, EOT)


def test_a_template_that_is_not_prefix_stable_is_refused(tmp_path):
    tok = build_tokenizer(tmp_path)
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                         "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}"
                         "<|im_start|>assistant:{% endif %}")
    with pytest.raises(tdata.DataError, match="prefix-stable"):
        tdata.encode_chat(tok, chat(), 4096, EOT)


def test_pad_collator():
    batch = tdata.PadCollator(pad_id=7)([{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]},
                                         {"input_ids": [4], "labels": [4]}])
    assert batch["input_ids"].tolist() == [[1, 2, 3], [4, 7, 7]]
    assert batch["labels"].tolist() == [[-100, 2, 3], [4, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]


def test_replay_share_and_seeded_order():
    for n in (1, 10, 97, 119, 1000):  # the largest r with r / (n + r) <= share, exactly
        for share in (Fraction(1, 5), Fraction(3, 20), Fraction(1, 2)):
            r = tdata.replay_count(n, float(share))
            assert Fraction(r, n + r) <= share < Fraction(r + 1, n + r + 1), (n, share, r)
    assert [tdata.replay_count(n, 0.2) for n in (1, 10, 97, 1000)] == [0, 2, 24, 250]
    assert tdata.replay_count(119, 0.15) == 21  # 21 / 140 is exactly 0.15
    assert tdata.replay_count(100, 0.0) == 0
    rows = [{"id": f"r{i}"} for i in range(20)]
    once = tdata.seeded_order(rows, 13, "train")
    assert once == tdata.seeded_order(rows[::-1], 13, "train")
    assert once != tdata.seeded_order(rows, 14, "train")


def test_a_tampered_corpus_is_refused_with_the_rebuild_command(tmp_path):
    corpus = build_tiny_corpus(tmp_path / "c", episodes=6)
    assert tdata.verify_corpus(corpus)["files"]
    with open(corpus / "wire" / "train.jsonl", "a") as fh:
        fh.write("\n")
    with pytest.raises(tdata.DataError, match="does not verify.*sha256 mismatch"):
        tdata.verify_corpus(corpus)
    with pytest.raises(tdata.DataError, match="python corpus/build.py --out .* --domain coding"):
        tdata.verify_corpus(tmp_path / "missing", "coding")


@pytest.mark.slow
def test_training_builds_a_missing_corpus_through_memworker_corpus(tmp_path, monkeypatch):
    """No script path: the corpus stage runs in process from any working directory."""
    from memworker.corpus import verify_corpus
    from memworker.train.cli import ensure_corpus

    monkeypatch.chdir(tmp_path)  # no corpus/build.py here
    with pytest.raises(tdata.DataError, match="python corpus/build.py --out c --seed 13 --domain"):
        ensure_corpus("c", "coding", no_build=True)
    ensure_corpus("c", "coding", no_build=False)
    manifest = verify_corpus(tmp_path / "c")
    assert manifest["args"]["domain"] == "coding" and manifest["seed"] == 13


def test_decision_weights_mark_where_values_start(smol_tok):
    """On the embedded tokenizer: the fork after "claims":[ , the first token of the quoted span,
    of the subject's name, the predicate, the value, the kind and the supersedes list (and the
    token after its "[") weigh `weight`; every other answer token 1 and the prompt 0. An empty
    answer weighs only its fork."""
    import bisect

    answer = ('{"claims":[[[["I moved to Lisbon",0]],"Ana","person","lives_in","Lisbon",'
              '"fact",null,["F1"]]]}')
    assert wire.dump_answer("extract", json.loads(answer)) == answer
    enc = tdata.encode_chat(smol_tok, chat(answer), 4096, EOT)
    weights = tdata.decision_weights(smol_tok, enc, answer, 4.0)
    start = enc.prompt_len
    assert weights[:start] == [0.0] * start and len(weights) == len(enc.input_ids)
    assert set(weights[start:]) == {1.0, 4.0}
    offsets = tdata.answer_offsets(smol_tok, enc.input_ids[start:])
    assert offsets == [len(smol_tok.decode(enc.input_ids[start:start + k], skip_special_tokens=True))
                       for k in range(len(offsets))]
    fork = answer.index("[[")
    sup = answer.index('["F1"]')
    chars = [fork, fork + 1, sup, sup + 1] + [answer.index(s) for s in (
        'I moved', 'Ana"', 'lives_in', 'Lisbon","fact', 'fact"')]
    expected = sorted({bisect.bisect_right(offsets, c) - 1 for c in chars})
    assert sorted(k - start for k, w in enumerate(weights) if w == 4.0) == expected
    assert len(expected) >= 6  # the span, name, predicate, value and kind tokens are distinct
    empty = tdata.encode_chat(smol_tok, chat('{"claims":[]}'), 4096, EOT)
    ew = tdata.decision_weights(smol_tok, empty, '{"claims":[]}', 4.0)
    assert 1 <= ew.count(4.0) <= 2 and ew[empty.prompt_len:].count(1.0) >= 2


def _rows(*spec):
    """Encoded rows from (task, prompt length, answer tokens, weights or None)."""
    out = []
    for task, prompt, answer, weights in spec:
        enc = tdata.Encoded([1] * (prompt + answer), [tdata.IGNORE] * prompt + [5] * answer,
                            group=task)
        enc.weights = weights
        out.append(enc)
    return out


def test_task_shares_record_the_natural_shares_and_rescale_to_the_asked_ones():
    """Natural shares count each task's summed answer-token weight (decision weights included);
    asked shares multiply a task's weights so the tasks' sums are those shares of an unchanged
    total; the prompt stays at 0 and a row without weights gets them."""
    spec = [("extract", 3, 6, [0.0] * 3 + [1, 10, 1, 1, 10, 1]),  # weight 24
            ("extract", 2, 4, None),  # weight 4
            ("reflect", 4, 4, None),  # weight 4
            ("consolidate", 1, 4, [0.0, 1, 1, 1, 1])]  # weight 4
    natural = tdata.task_shares(_rows(*spec), {})
    assert {t: v["natural_share"] for t, v in natural.items()} == pytest.approx(
        {"extract": 28 / 36, "reflect": 4 / 36, "consolidate": 4 / 36}, abs=1e-4)
    assert natural["extract"]["rows"] == 2 and natural["extract"]["answer_tokens"] == 10
    assert all(v["share"] == v["natural_share"] and v["multiplier"] == 1 for v in natural.values())
    untouched = _rows(*spec)
    tdata.task_shares(untouched, {})
    assert untouched[1].weights is None  # natural shares change no weight

    rows = _rows(*spec)
    asked = {"extract": 0.5, "consolidate": 0.25, "reflect": 0.25}
    record = tdata.task_shares(rows, asked)
    sums = {}
    for enc in rows:
        assert all(w == 0 for w, y in zip(enc.weights, enc.labels, strict=True) if y == tdata.IGNORE)
        sums[enc.group] = sums.get(enc.group, 0) + tdata.answer_weight(enc)
    assert sum(sums.values()) == pytest.approx(36)
    assert {t: v / 36 for t, v in sums.items()} == pytest.approx(asked)
    assert record["extract"]["multiplier"] == pytest.approx(18 / 28, abs=1e-4)
    assert record["reflect"]["multiplier"] == pytest.approx(9 / 4, abs=1e-4)
    assert rows[0].weights[4] == pytest.approx(10 * 18 / 28)  # a decision token keeps its ratio
    assert rows[1].weights == pytest.approx([0, 0] + [18 / 28] * 4)


@pytest.mark.parametrize("asked", [{"extract": 0.5, "reflect": 0.5},
                                   {"extract": 0.4, "reflect": 0.3, "consolidate": 0.2,
                                    "other": 0.1}])
def test_task_shares_must_name_exactly_the_rows_tasks(asked):
    rows = _rows(("extract", 1, 2, None), ("reflect", 1, 2, None), ("consolidate", 1, 2, None))
    with pytest.raises(tdata.DataError, match="name each of them once"):
        tdata.task_shares(rows, asked)
    assert all(enc.weights is None for enc in rows)  # nothing changed before the refusal


@pytest.mark.parametrize("task,keys", [
    ("reflect", ("insufficient_evidence", "citations", "answer")),   # decisions first (v3)
    ("reflect", ("answer", "citations", "insufficient_evidence")),   # text first (before)
    ("consolidate", ("supports", "statement")),
])
def test_wire_rows_of_an_older_wire_form_are_refused(tmp_path, task, keys):
    """A corpus whose answers are not in the wire form this code writes (here: a reflection or an
    observation with the ids a model wrote before wire v4, in either order) is refused with the
    rebuild command; a current one loads."""
    from memworker.corpus import load_rows

    corpus = build_tiny_corpus(tmp_path / "c", episodes=6)
    assert len(tdata.load_wire_rows(corpus, "train")) > 0
    gold = {r["id"]: r["gold"] for r in load_rows(corpus, "train", form="canonical")}
    path = corpus / "wire" / "train.jsonl"
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    row = next(r for r in rows if r["task"] == task and (task == "reflect" or gold[r["id"]][
        "observations"]))
    answer = gold[row["id"]]
    old = ({k: answer[k] for k in keys} if task == "reflect" else
           {"observations": [{k: o[k] for k in keys} for o in answer["observations"]]})
    row["messages"][-1]["content"] = json.dumps(old, separators=(",", ":"), ensure_ascii=False)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    from memworker.corpus.build import write_manifest
    from memworker.hashing import sha256_file

    manifest = json.loads((corpus / "manifest.json").read_text("utf-8"))
    manifest["files"]["wire/train.jsonl"] = sha256_file(path)  # sealed, as an older build was
    write_manifest(corpus, manifest)
    with pytest.raises(tdata.DataError, match=f"row {row['id']} is not in the current wire form"
                                              ".*python corpus/build.py --out"):
        tdata.load_wire_rows(corpus, "train")


def test_a_mixed_corpus_makes_its_share_of_the_train_rows_and_joins_validation(tmp_path):
    """mix_corpus/mix_share (issue 47 item 3): the second corpus's train rows are `share` of all
    train rows, its seeded order cycled (no two passes of a row side by side by construction),
    its val rows after the stage's own, and the provenance says how many and from where."""
    from memworker.train import loop
    from memworker.train.config import StageConfig

    main = build_tiny_corpus(tmp_path / "main", episodes=6)
    other = build_tiny_corpus(tmp_path / "other", domain="coding", episodes=3)
    plain = loop.prepare_data(StageConfig(name="t", corpus=str(main)))
    n_main = len(plain["train"])
    n_other = len(tdata.load_wire_rows(other, "train"))
    cfg = StageConfig(name="t", corpus=str(main), mix_corpus=str(other), mix_share=0.75)
    mixed = loop.prepare_data(cfg)
    mix = mixed["provenance"]["mix"]
    assert mix["rows"] == 3 * n_main and mix["rows"] > n_other  # cycled: more than one pass
    assert len(mixed["train"]) == 4 * n_main and mix["share"] == 0.75
    assert mix["distinct_rows"] == n_other and mix["passes"] == round(3 * n_main / n_other, 3)
    ids = [r["id"] for r in mixed["train"]]
    assert sorted(set(ids) - {r["id"] for r in plain["train"]}) == \
        sorted(r["id"] for r in tdata.load_wire_rows(other, "train"))
    assert mixed["val"][: len(plain["val"])] == plain["val"]
    assert len(mixed["val"]) == len(plain["val"]) + mix["val_rows"] and mix["val_rows"] > 0
    assert loop.prepare_data(cfg)["train"] == mixed["train"]  # seeded: the same every time
    from memworker.train.config import ConfigError

    with pytest.raises(ConfigError, match="mix_share > 0 needs mix_corpus"):
        StageConfig(name="t", mix_share=0.5).validate()
    with pytest.raises(ConfigError, match=r"mix_share must be in \[0, 1\), not 1.0"):
        StageConfig(name="t", mix_corpus="x", mix_share=1.0).validate()
