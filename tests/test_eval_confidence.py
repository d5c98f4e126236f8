"""eval/studies/confidence.py: a claim's score from its fields' token log-probabilities, and support
and coverage with the unsure claims dropped (alone and beside the rules); no model runs."""

from __future__ import annotations

import json
import math

import pytest

from memworker.eval import runner
from memworker.eval.cli import main as eval_main
from memworker.eval.studies import confidence, hybrid
from memworker.hashing import canonical_json
from memworker.inference import codec
from tests.helpers import token_pieces

RAW = ('{"claims":[[[["I live in Porto.",1]],"the user","person","lives_in","Porto","fact",null,'
       '[]],[[["I work as a nurse.",2]],"the user","person","works_as","a nurse","fact",null,[]]]}')


def test_claim_spans_find_each_field_in_the_raw_answer():
    spans = confidence.claim_spans(RAW)
    assert len(spans) == 2
    text = {k: RAW[a:b] for k, (a, b) in spans[1].items()}
    assert text["quote"] == "I work as a nurse."
    assert (text["name"], text["predicate"], text["value"], text["kind"]) == \
        ("the user", "works_as", "a nurse", "fact")
    assert text["time_expression"] == "null" and text["supersedes"] == "[]"
    assert text["claim"].startswith('[[["I work') and text["claim"].endswith("[]]")


def test_field_stats_take_the_tokens_of_each_field():
    tokens = token_pieces(RAW, {"works": -2.0, "_as": -0.5, "a nurse": -1.0, "lives_in": -0.1})
    assert "".join(p for p, _ in tokens) == RAW
    first, second = (confidence.field_stats(s, tokens) for s in confidence.claim_spans(RAW))
    assert second["predicate"] == {"min": -2.0, "sum": -2.5, "mean": -1.25, "first": -2.0}
    assert second["value"]["first"] == -1.0
    assert confidence.SCORES["first(predicate)+first(value)"](second) == -3.0
    assert confidence.SCORES["first(predicate)+first(value)"](first) == pytest.approx(-0.1)


def _sample(raw: str, tokens: list[list] | None, diagnostics: list[str], claims: int) -> dict:
    attempt = {"raw": raw, **({"token_logprobs": tokens} if tokens is not None else {})}
    return {"id": "r", "attempts": [attempt], "diagnostics": diagnostics,
            "output": {"claims": [{}] * claims}}


def test_kept_claims_follow_the_codecs_drops_and_refuse_tokens_that_do_not_spell_the_answer():
    tokens = token_pieces(RAW, {"works": -2.0, "lives_in": -0.1})
    kept = confidence.kept_claim_stats(_sample(RAW, tokens, ["claims/0: dropped (repeats)"], 1))
    assert len(kept) == 1 and kept[0]["predicate"]["first"] == -2.0
    assert confidence.kept_claim_stats(_sample(RAW, None, [], 2)) is None
    with pytest.raises(runner.EvalError, match="do not spell"):
        confidence.kept_claim_stats(_sample(RAW, tokens[1:], [], 2))
    with pytest.raises(runner.EvalError, match="claims found"):
        confidence.kept_claim_stats(_sample(RAW, tokens, [], 1))


def test_a_turns_sample_is_scored_from_each_turns_accepted_generation():
    """The turns form: each claim's tokens are its own turn's; a rejected generation is skipped,
    a turn's own drops and the merge's drops (claims/N of the joined list) both follow the
    codec, and the claims beyond the output (the contract's limit) are left out."""
    one = ('{"claims":[[[["I live in Porto.",1]],"the user","person","lives_in","Porto","fact",'
           'null,[]]]}')
    inputs = {"events": [{"index": 0, "role": "assistant"}, {"index": 1, "role": "user"},
                         {"index": 2, "role": "user"}]}
    turns = [{"raw": one, "error": None, "token_logprobs": token_pieces(one, {"lives_in": -0.1})},
             {"raw": "bad", "error": "not json", "token_logprobs": [["bad", -9.0]]},
             {"raw": RAW, "error": None,
              "token_logprobs": token_pieces(RAW, {"lives_in": -3.0, "works": -2.0})}]
    sample = {"id": "r", "attempts": [{"raw": "merged"}], "turns": turns,
              "diagnostics": ["1 turns accepted on a retry",
                              "claims/1: dropped (repeats claims/0)"],
              "output": {"claims": [{}] * 2}}
    kept = confidence.kept_claim_stats(sample, inputs)
    assert [k["predicate"]["first"] for k in kept] == [-0.1, -2.0]
    # the second turn dropped its own first claim: the merge then kept both that remain
    sample["diagnostics"] = ["event 2: claims/0: dropped (value)"]
    assert [k["predicate"]["first"] for k in confidence.kept_claim_stats(sample, inputs)] == \
        [-0.1, -2.0]
    # three claims kept, the output holds two (the contract's limit): the later one is left out
    sample["diagnostics"] = []
    assert [k["predicate"]["first"] for k in confidence.kept_claim_stats(sample, inputs)] == \
        [-0.1, -3.0]
    with pytest.raises(runner.EvalError, match="needs its row's input"):
        confidence.kept_claim_stats(sample)
    with pytest.raises(runner.EvalError, match="2 accepted turns for 1 asked"):
        confidence.kept_claim_stats(sample, {"events": inputs["events"][:2]})


def test_auc_counts_pairs_and_ties():
    assert confidence.auc([3.0, 2.0], [1.0, 0.0]) == 1.0
    assert confidence.auc([0.0], [1.0]) == 0.0
    assert confidence.auc([1.0], [1.0]) == 0.5
    assert math.isnan(confidence.auc([], [1.0]))


def _oracle_folder(tiny_corpus, tmp_path):
    """An eval folder with the rules arm and `oracle`: the gold as a model, every token at log
    p 0."""
    out = tmp_path / "ev"
    assert eval_main(["--arm", "rules", "--set", "val", "--corpus", str(tiny_corpus),
                      "--task", "extract", "--out", str(out), "--no-progress",
                      "--no-plots"]) == 0
    rows = runner.load_eval_rows(tiny_corpus, "val")
    with open(out / runner.SAMPLES, "ab") as fh:   # the gold as a model, every token at log p 0
        for row in rows:
            if row["task"] != "extract":
                continue
            result = codec.verify_canonical("extract", row["input"], row["gold"])
            sample = {"arm": "oracle", "id": row["id"], "episode": row["episode"],
                      "task": "extract", "prompt_sha256": "0" * 64, "schema_sha256": "0" * 64,
                      "max_tokens": 1024, "attempts": [{"raw": result.raw, "token_logprobs":
                                                       [[c, 0.0] for c in result.raw]}],
                      "status": "first_try", "error": None, "output": result.output,
                      "wire": result.wire, "diagnostics": result.diagnostics, "seconds": 1.0}
            sample["verdicts"] = runner.grade_sample(row, sample)
            fh.write(canonical_json(sample) + b"\n")
    return out


def _without_logprobs(out, plain):
    """A copy of the folder `out` at `plain` with every attempt's log-probabilities removed."""
    plain.mkdir()
    (plain / "config.json").write_text((out / "config.json").read_text())
    with open(plain / runner.SAMPLES, "wb") as fh:
        for line in (out / runner.SAMPLES).read_text().splitlines():
            s = json.loads(line)
            for a in s["attempts"]:
                a.pop("token_logprobs", None)
            fh.write(canonical_json(s) + b"\n")
    return plain


def test_dropping_claims_is_regraded_alone_and_beside_the_rules(tiny_corpus, tmp_path):
    out = _oracle_folder(tiny_corpus, tmp_path)
    folder = confidence.Rows(out, "oracle")
    score = "first(predicate)+first(value)"
    gold = folder.totals("all", "model")
    assert gold[0] == gold[1] > 0 and gold[2] == gold[3]     # the gold: all supported, all covered
    assert folder.totals("all", "model", score, 0.0) == gold             # every score is 0: kept
    none = folder.totals("all", "model", score, 0.5)
    assert none[:3] == [0, 0, 0] and none[3] == gold[3]
    assert folder.totals("all", "union", score, 0.5) == folder.totals("all", "rules")
    assert folder.totals("all", "union", score, 0.0)[2] == gold[3]
    halves = [folder.totals(p, "model") for p in "AB"]
    assert [a + b for a, b in zip(*halves, strict=True)] == gold
    lines = confidence.report(folder, [score], quantiles=(0.5,))
    assert any(line.startswith("| rules + model, first(predicate)") for line in lines)
    # a model arm run without --logprobs cannot be scored
    plain = _without_logprobs(out, tmp_path / "plain")
    with pytest.raises(runner.EvalError, match="--logprobs"):
        confidence.Rows(plain, "oracle")


def test_a_hybrid_keeps_only_the_models_surest_claims_beside_the_rules(tiny_corpus, tmp_path,
                                                                       capsys):
    out = _oracle_folder(tiny_corpus, tmp_path)
    folder = confidence.Rows(out, "oracle")
    score = "first(predicate)+first(value)"
    rules, gold = folder.totals("all", "rules"), folder.totals("all", "model")
    assert rules[2] < gold[3]                    # the rules alone miss facts the oracle states

    def extract(to, threshold):
        assert hybrid.main(["--out", str(out), "--model", "oracle", "--to", str(tmp_path / to),
                            "--min-score", str(threshold), "--score", score]) == 0
        summary = json.loads((tmp_path / to / "summary.json").read_text())
        config = json.loads((tmp_path / to / "config.json").read_text())
        assert config["hybrid"]["min_score"] == {"score": score, "threshold": threshold}
        return summary["metrics"]["hybrid"]["extract"]["metrics"]["extract_coverage"]

    none, every = extract("h-none", 0.5), extract("h-all", 0.0)   # every token's log p is 0
    assert none["num"] == rules[2] and every["num"] == folder.totals("all", "union")[2]
    assert every["num"] > none["num"]
    # a model arm without log-probabilities cannot be filtered; --extract rules has no model
    # claims to filter
    plain = _without_logprobs(out, tmp_path / "plain")
    capsys.readouterr()
    assert hybrid.main(["--out", str(plain), "--model", "oracle", "--to", str(tmp_path / "x"),
                        "--min-score", "0"]) == 2
    assert "--logprobs" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        hybrid.main(["--out", str(out), "--model", "oracle", "--to", str(tmp_path / "y"),
                     "--extract", "rules", "--min-score", "0"])


def test_a_sweep_reads_each_threshold_against_the_rules(tiny_corpus, tmp_path, capsys):
    """`eval/studies/hybrid.py --sweep`: per threshold, what a claim gate would score against the
    rules (the oracle's every token is at log p 0: a threshold of 0 keeps every claim, 0.5 none)."""
    out = _oracle_folder(tiny_corpus, tmp_path)
    policies = {"extract": "model", "consolidate": "rules", "reflect": "rules"}
    keep, none = hybrid.sweep(out, "oracle", [0.0, 0.5], policies, resamples=200)
    gold = confidence.Rows(out, "oracle").totals("all", "model")
    assert [keep["extract_support"]["num"], keep["extract_support"]["den"]] == gold[:2]
    assert keep["extract_coverage"]["num"] == gold[3] and keep["extract_coverage"]["diff"] > 0
    assert keep["min_lower"] == min(keep["extract_support"]["ci"][0],
                                    keep["extract_coverage"]["ci"][0])
    assert none["extract_coverage"]["num"] == 0 and none["extract_coverage"]["diff"] < 0
    assert none["extract_support"]["ci"] is None and none["min_lower"] == float("-inf")
    capsys.readouterr()
    assert hybrid.main(["--out", str(out), "--model", "oracle", "--extract", "model",
                        "--sweep", "0,0.5", "--resamples", "200"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("T 0: support ") and printed[-1].startswith(
        "largest smaller lower bound: T 0 (")
    assert not list(tmp_path.glob("gated*"))   # written nowhere
    with pytest.raises(SystemExit):
        hybrid.main(["--out", str(out), "--model", "oracle"])   # neither --to nor --sweep


def test_early_stop_counts_the_tokens_after_the_first_dropped_claim_and_the_claims_lost(
        tmp_path, capsys):
    """RAW's first claim scores -3 (lives_in -3, Porto 0) and is dropped at -1; its score is
    known at "Porto"'s first character, so the turn would stop there, losing the second claim
    (works_as -0.1: kept by the gate, written after it)."""
    tokens = token_pieces(RAW, {"lives_in": -3.0, "works_as": -0.1})
    sample = {"arm": "m", "task": "extract", "id": "r",
              "turns": [{"raw": RAW, "error": None, "token_logprobs": tokens},
                        {"raw": '{"claims":[]}', "error": "rejected", "token_logprobs": None}]}
    # the pieces after "Porto"'s "P": one character each, but "works_as" is one piece
    after = len(RAW) - (RAW.index('"Porto"') + 2) - (len("works_as") - 1)
    # each claim from its opening bracket, in one-character pieces but its predicate (one piece)
    c1 = '[[["I live in Porto.",1]],"the user","person","lives_in","Porto","fact",null,[]]'
    c2 = '[[["I work as a nurse.",2]],"the user","person","works_as","a nurse","fact",null,[]]'
    assert c1 + "," + c2 in RAW
    assert confidence.early_stop([sample], "m", -1.0) == {
        "turns": 1, "turns_cut": 1, "tokens": len(tokens), "tokens_saved": after,
        "claims_kept": 0, "claims_lost": 1,
        "value_at": [c1.index('"Porto"') + 1 - 7 + 1, c2.index('"a nurse"') + 1 - 7 + 1],
        "claim_tokens": [len(c1) - 7, len(c2) - 7]}
    assert confidence.early_stop([sample], "m", -5.0)["claims_kept"] == 2   # nothing stopped
    (tmp_path / "samples.jsonl").write_text(json.dumps(sample) + "\n")
    assert confidence.main(["--out", str(tmp_path), "--model", "m", "--early-stop=-1"]) == 0
    printed = capsys.readouterr().out
    assert "1 of 1 turns stopped early" in printed and "2 claims written: each" in printed
    assert confidence.main(["--out", str(tmp_path), "--model", "x", "--early-stop=-1"]) == 2
