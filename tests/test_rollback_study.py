"""eval/studies/rollback.py: a wire that decides a claim early and rolls it back, replayed on
recorded proposals — its token counting per decision point, the repeats a turn writes again, and
the designs' kept claims graded as the evaluator grades them."""

from __future__ import annotations

import json

from memworker.eval.studies import rollback as study
from memworker.eval.studies.wire_cost import claim_fields
from tests.test_verifier import _proposing_folder

TEXTS = {0: "We moved to Valencia in March. The flat is tiny but the light is great.",
         2: "My sister Carmen only drinks cafe con leche."}
V3 = [[["We moved to Valencia in March.", 0]], "the user", "person", "lives_in", "Valencia",
      "fact", "in March", []]


def test_a_claim_costs_fewer_tokens_by_its_value_when_predicate_and_value_come_first():
    v3 = study.claim_costs(claim_fields(V3, "v3", TEXTS))
    v5a = study.claim_costs(claim_fields(V3, "v5a", TEXTS))
    v5b = study.claim_costs(claim_fields(V3, "v5b", TEXTS))
    assert v5a["value"] <= 8 < v3["value"] < v3["whole"]          # after the quote in v3
    assert v5a["value"] < v5a["value_end"] < v5a["quotes"] < v5a["whole"]
    assert v5b["quotes"] < v5a["quotes"] and v5b["whole"] < v5a["whole"]   # [event, sentence]
    assert abs(v5a["whole"] - v3["whole"]) <= 2                   # the same fields, reordered


def test_a_quote_becomes_the_sentence_it_lies_in():
    claim = {"subject": {"name": "Carmen", "type": "person"}, "predicate": "likes",
             "value": "cafe con leche", "quotes": ["cafe con leche"], "source_indices": [2]}
    got = study.sentence_quoted(claim, TEXTS)
    assert got["quotes"] == ["My sister Carmen only drinks cafe con leche."]
    assert got["source_indices"] == [2] and claim["quotes"] == ["cafe con leche"]


OTHER = [[["My sister Carmen only drinks cafe con leche.", 2]], "Carmen", "person", "likes",
         "cafe con leche", "preference", None, []]


def test_claims_a_turn_wrote_again_are_counted_and_known_as_repeats():
    raw = json.dumps({"claims": [V3, V3, ["not", "a", "claim"]]})
    model = {"turns": [{"raw": raw}, {"raw": "{\"claims\":[" }], "wire": {"claims": [V3]}}
    extra, lost = study.extra_claims(model, TEXTS)
    assert len(extra) == 1 and extra[0]["repeat"]                 # the malformed one not counted
    assert extra[0]["v5b_value_end"] < extra[0]["v5b"] and not lost
    # a turn that loops: stopped at its first repeat, the accepted claim after it is never written
    looping = {"turns": [{"raw": json.dumps({"claims": [V3, V3, OTHER, V3]})}],
               "wire": {"claims": [V3, OTHER]}}
    extra, lost = study.extra_claims(looping, TEXTS)
    assert lost == {1} and [e["stop_written"] for e in extra] == [True, False]
    assert [e["repeat"] for e in extra] == [True, True]


def test_a_v6_runs_written_claims_are_matched_in_their_own_layout():
    """A run in claim layout v6 wrote `[predicate, value, ...]` without quotes; its accepted
    claims (the sample's wire, v3 with the codec's quotes) are found among them, and a repeat is
    still known by its predicate and value."""
    from memworker import wire

    v6 = wire.pack_v6(wire.unpack_claim(V3))
    model = {"turns": [{"raw": json.dumps({"claims": [v6, v6]})}], "wire": {"claims": [V3]}}
    extra, lost = study.extra_claims(model, TEXTS, "v6")
    assert len(extra) == 1 and extra[0]["repeat"] and not lost
    assert extra[0]["v6"] == study.claim_costs(claim_fields(V3, "v6", TEXTS))["whole"]


def test_the_replay_keeps_what_each_gate_keeps_and_rolls_back_the_rest(tiny_corpus, tmp_path,
                                                                       capsys):
    """Every token of the fabricated arm at log p -1, so every claim scores -2: A=-100 keeps them
    all, A=0 none (the verifier alone decides the either-gate at B)."""
    out = _proposing_folder(tiny_corpus, tmp_path)
    target = tmp_path / "rb.json"
    assert study.main(["--out", str(out), "--model", "student", "--logprob=-100",
                       "--logprob=0", "--either=0,0.5", "--json", str(target)]) == 0
    printed = capsys.readouterr().out
    f = json.loads(target.read_text())
    every = f["every_claim_v3"]
    by = {(d["design"], d["gate"]): d for d in f["designs"]}
    assert by[("v5a, log-prob at the value", "lp>=-100")]["totals"] == every["totals"]
    none = by[("v5a, log-prob at the value", "lp>=0")]
    assert none["kept"] == 0 and none["totals"]["claims"] == 0
    assert by[("v3, gate at the end", "lp>=0")]["answer_tokens"] == every["answer_tokens"]
    assert none["answer_tokens"]["median"] < every["answer_tokens"]["median"]
    either = by[("v5b, either at the quote", "lp>=0 or p>=0.5")]
    assert 0 < either["kept"] < f["claims"]
    assert either["answer_tokens"]["median"] < every["answer_tokens"]["median"]
    assert "| v5b, either at the quote | lp>=0 or p>=0.5 |" in printed
    # v6: no quote written (the codec chooses it), so every claim is shorter
    v6 = by[("v6 (the codec quotes), gate at the end", "lp>=0 or p>=0.5")]
    assert 0 < v6["kept"] <= f["claims"]
    assert v6["answer_tokens"]["median"] < every["answer_tokens"]["median"]
    assert f["claim_tokens_median"]["v6"]["whole"] < f["claim_tokens_median"]["v3"]["whole"]
    assert study.main(["--out", str(out), "--model", "student", "--either", "0.5"]) == 2
    # --rows-of: only the rows another folder ran (here the first 2 extract rows)
    from memworker.eval.cli import main as eval_main
    few = tmp_path / "few"
    assert eval_main(["--arm", "rules", "--set", "val", "--corpus", str(tiny_corpus), "--task",
                      "extract", "--limit", "2", "--out", str(few), "--no-progress",
                      "--no-plots"]) == 0
    assert study.main(["--out", str(out), "--model", "student", "--rows-of", str(few),
                       "--json", str(target)]) == 0
    assert json.loads(target.read_text())["windows"] == 2 < f["windows"]


def test_a_folder_whose_gate_dropped_claims_at_run_time_is_refused(tiny_corpus, tmp_path, capsys):
    out = _proposing_folder(tiny_corpus, tmp_path)
    samples = out / "samples.jsonl"
    lines = samples.read_text().splitlines()
    for n, line in enumerate(lines):
        s = json.loads(line)
        if s["arm"] == "student" and s["output"]["claims"]:
            s["gate"] = {"dropped": [0]}
            s["output"]["claims"] = s["output"]["claims"][1:]
            s["wire"]["claims"] = s["wire"]["claims"][1:]
            lines[n] = json.dumps(s)
            break
    samples.write_text("\n".join(lines) + "\n")
    assert study.main(["--out", str(out), "--model", "student"]) == 2
    assert "no --claim-gate" in capsys.readouterr().err
