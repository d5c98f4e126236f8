"""eval/studies/fork.py: the fork threshold (propose only where the student would open a claim),
a turn stopped at its first repeat, and the oracle turn skip, replayed on recorded proposals —
the fork score the codec would compute, the token accounting, and the kept claims graded as the
evaluator grades them (on a committed natural-dev folder of release v4's student)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from memworker.eval.studies import fork as study
from memworker.inference.codec import FORK_TEXT, fork_score

FOLDER = Path(__file__).resolve().parents[1] / "receipts/eval/natural-dev/e22"
CLAIM = '[[["I moved to Lyon.",0]],"the user","person","lives_in","Lyon","fact",null,[]]'


def test_the_fork_score_sums_the_tokens_up_to_the_first_claims_opening_bracket():
    tokens = [['{"', -0.01], ["claim", -0.02], ["s", 0.0], ['":', -0.03], ["[[", -2.0],
              ["[\"", -0.5], ["I", -1.0]]
    assert fork_score(tokens) == (-2.06, 5)
    # a tokenization that writes the opening with the next bracket still stops at that token
    assert fork_score([['{"claims":[[[', -0.25], ['"I', -3.0]]) == (-0.25, 1)
    # a closed list is no fork; no tokens, none
    assert fork_score([['{"claims":[]}', -0.1]]) == (None, 1)
    assert fork_score([]) == (None, 0)
    assert len(FORK_TEXT) == 12


def test_a_turn_stopped_at_its_first_repeat_costs_up_to_that_claims_end():
    raw = '{"claims":[' + ",".join([CLAIM, CLAIM, CLAIM]) + "]}"
    tokens = [[c, -0.1] for c in raw]          # one token a character
    turn = study.Turn([{"raw": raw, "token_logprobs": tokens, "completion_tokens": len(raw) + 1}],
                      raw, tokens, "t")
    assert turn.repeat_at == 1
    second_end = len('{"claims":[') + 2 * len(CLAIM) + 1
    assert turn.stopped == second_end + study.CLOSE_TOKENS < turn.recorded
    assert turn.fork == round(-0.1 * len(FORK_TEXT), 4) and turn.fork_tokens == len(FORK_TEXT)
    with pytest.raises(study.EvalError, match="does not open a claim"):
        study.Turn([{"raw": '{"claims":[]}', "token_logprobs": [['{"claims":[]}', -0.1]]}],
                   '{"claims":[]}', [['{"claims":[]}', -0.1]], "t")


@pytest.fixture(scope="module")
def replay(natural_dev_corpus):
    from memworker.inference.gate import ClaimGate
    from memworker.inference.verifier import Verifier

    return study.SetReplay("natural-dev", FOLDER, "n1", ClaimGate.parse("verifier>=0.9"),
                           Verifier.load(), union=True, corpus=natural_dev_corpus)


def test_today_is_the_recorded_run_and_cutting_every_turn_leaves_the_rules(replay):
    today = replay.design(-math.inf, False)
    samples = [json.loads(line) for line in (FOLDER / "samples.jsonl").open()]
    recorded = sorted(sum(t["completion_tokens"] for t in s["turns"]) for s in samples
                      if s["arm"] == "n1" and s["task"] == "extract")
    assert today["tokens_median"] == recorded[len(recorded) // 2] or \
        today["tokens_median"] == (recorded[len(recorded) // 2 - 1]
                                   + recorded[len(recorded) // 2]) / 2
    assert today["turns_cut"] == 0 and today["kept"] >= today["supported"] > 0
    # the gated model's claims graded alone are what the evaluator gave the gate's keep
    rules = [0, 0]
    for row, _, r, _ in replay.rows.items:
        c = study.grade_sample(row, r)["counts"]
        rules = [rules[0] + c["claims"], rules[1] + c["supported"]]
    none = replay.design(1.0, False)              # above every score: every turn cut at its fork
    assert none["turns_cut"] == none["turns"] and none["claims_written"] == 0
    assert [none["kept"], none["supported"]] == rules
    assert none["tokens_median"] <= 2 * len(FORK_TEXT)


def test_a_higher_threshold_never_writes_more_and_the_oracle_asks_only_fact_turns(replay):
    designs = [replay.design(t, False) for t in (-math.inf, -6.0, -0.5, -0.3)]
    written = [d["claims_written"] for d in designs]
    assert written == sorted(written, reverse=True)
    assert [d["tokens_median"] for d in designs] == sorted((d["tokens_median"] for d in designs),
                                                           reverse=True)
    # each turn cut after its first claim: only first claims written, never more tokens
    one = replay.design(-math.inf, False, one_claim=True)
    firsts = sum(k == 0 for w in replay.windows for _, k in w.origin)
    assert one["claims_written"] == firsts < designs[0]["claims_written"]
    assert one["tokens_median"] < designs[0]["tokens_median"] and one["one_claim"]
    assert all(t.first_claim <= t.recorded for w in replay.windows for t in w.turns)
    oracle = replay.design(-math.inf, False, oracle=True)
    no_fact = sum(not f for w in replay.windows for f in w.fact_turns)
    assert oracle["turns_cut"] == no_fact > 0
    assert oracle["tokens_median"] < designs[0]["tokens_median"]


def test_the_command_prints_the_table_and_refuses_a_folder_without_log_probabilities(
        tmp_path, capsys, natural_dev_corpus):
    target = tmp_path / "f.json"
    here = ["--corpus", f"nd={natural_dev_corpus}"]
    assert study.main(["--folder", f"nd={FOLDER}:n1", "--union", "--thresholds=-inf,-0.5",
                       "--json", str(target), *here]) == 0
    out = capsys.readouterr().out
    assert "| none (today) | no | 0/259 |" in out and "oracle" in out
    figures = json.loads(target.read_text())
    assert len(figures["sets"]["nd"]["designs"]) == 5
    assert study.main(["--folder", f"nd={FOLDER}:rules", *here]) == 2
    assert "error" in capsys.readouterr().err
    assert study.main(["--folder", "nd=nowhere"]) == 2
    assert study.main(["--folder", f"nd={FOLDER}:n1", *here, "--corpus", f"val={tmp_path}"]) == 2
    assert "--corpus val: no --folder of that set" in capsys.readouterr().err
    # --first N replays the first N windows, those `bench.py --worker natural-dev:N` times
    assert study.main(["--folder", f"nd={FOLDER}:n1", *here, "--thresholds=-inf", "--first", "5",
                       "--one-claim", "--json", str(target)]) == 0
    assert "each turn cut after its first claim" in capsys.readouterr().out
    first = json.loads(target.read_text())["sets"]["nd"]
    assert [d["one_claim"] for d in first["designs"]] == [False, False, False, True]
    assert first["rows"] == 5 and first["designs"][0]["turns"] < figures["sets"]["nd"][
        "designs"][0]["turns"]
    with pytest.raises(SystemExit):
        study.main(["--folder", f"nd={FOLDER}:n1", "--first", "0"])
