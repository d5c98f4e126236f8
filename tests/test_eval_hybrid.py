"""eval/studies/hybrid.py: a hybrid rules-and-model worker's answers composed from an evaluation
folder's rules and model arms (merged before the codec, graded by the same grader); no model runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memworker import wire
from memworker.eval import runner
from memworker.eval.cli import main as eval_main
from memworker.eval.studies.hybrid import compose
from memworker.eval.studies.rowtools import merge_extract
from memworker.hashing import canonical_json
from memworker.inference import codec

ROOT = Path(__file__).resolve().parents[1]


def _claim(subject: str, predicate: str, value: str, event: int, quote: str = "q") -> list:
    return wire.pack_claim({"quotes": [{"quote": quote, "event": event}],
                            "subject": {"name": subject, "type": "person"},
                            "predicate": predicate, "value": value, "kind": "fact",
                            "time_expression": None, "supersedes": []})


def test_union_adds_what_the_rules_did_not_say_and_fill_only_other_events():
    rules = {"claims": [_claim("the user", "lives_in", "Porto", 1)]}
    model = {"claims": [_claim("The user", "lives_in", "porto", 1),    # says the same: dropped
                        _claim("the user", "works_as", "a nurse", 1),  # new, same event
                        _claim("Ana", "lives_in", "Lisbon", 3)]}       # new, other event
    union = merge_extract(rules, model, "union", limit=12)["claims"]
    assert union == [rules["claims"][0], model["claims"][1], model["claims"][2]]
    fill = merge_extract(rules, model, "fill", limit=12)["claims"]
    assert fill == [rules["claims"][0], model["claims"][2]]
    assert merge_extract(rules, model, "union", limit=2)["claims"] == union[:2]
    assert merge_extract(rules, model, "rules", limit=12) == rules
    assert merge_extract(None, model, "model", limit=12) == model
    assert merge_extract(rules, None, "union", limit=12) == rules   # a failed model row


def _oracle_samples(corpus: Path, out: Path) -> None:
    """Append an arm `oracle` whose answers are the rows' gold, through the codec."""
    rows = runner.load_eval_rows(corpus, "val")
    with open(out / runner.SAMPLES, "ab") as fh:
        for row in rows:
            result = codec.verify_canonical(row["task"], row["input"], row["gold"])
            sample = {"arm": "oracle", "id": row["id"], "episode": row["episode"],
                      "task": row["task"], "prompt_sha256": "0" * 64, "schema_sha256": "0" * 64,
                      "max_tokens": 1024, "attempts": [{"raw": result.raw, "error": None,
                                                        "finish_reason": "stop"}],
                      "status": "first_try", "error": None, "output": result.output,
                      "wire": result.wire, "diagnostics": result.diagnostics, "seconds": 1.5}
            sample["verdicts"] = runner.grade_sample(row, sample)
            fh.write(canonical_json(sample) + b"\n")


def _metric(summary: dict, arm: str, task: str, name: str) -> dict:
    return summary["metrics"][arm][task]["metrics"][name]


def test_a_hybrid_folder_is_composed_graded_and_compared(tiny_corpus, tmp_path):
    out = tmp_path / "ev"
    assert eval_main(["--arm", "rules", "--set", "val", "--corpus", str(tiny_corpus),
                      "--out", str(out), "--no-progress", "--no-plots"]) == 0
    _oracle_samples(tiny_corpus, out)
    to = tmp_path / "hy"
    summary = compose(out, "oracle", to, {"extract": "union", "consolidate": "model",
                                          "reflect": "rules"}, resamples=200)
    assert summary["arms"] == ["oracle", "rules", "hybrid"]
    cov = {a: _metric(summary, a, "extract", "extract_coverage") for a in summary["arms"]}
    # the gold covers every fact; the rules' claims on top cannot take coverage away
    assert cov["hybrid"]["num"] == cov["oracle"]["num"] > cov["rules"]["num"]
    sup = {a: _metric(summary, a, "extract", "extract_support") for a in summary["arms"]}
    assert sup["hybrid"]["den"] >= sup["rules"]["den"]
    assert sup["hybrid"]["num"] >= sup["rules"]["num"]
    for task, source in (("consolidate", "oracle"), ("reflect", "rules")):
        name = {"consolidate": "consolidate_correct", "reflect": "reflect_correct"}[task]
        assert _metric(summary, "hybrid", task, name)["num"] == \
            _metric(summary, source, task, name)["num"]
    samples = runner.read_samples(to / runner.SAMPLES)
    hybrid = [s for s in samples if s["arm"] == "hybrid"]
    assert len(hybrid) == len(runner.load_eval_rows(tiny_corpus, "val"))
    assert all(s["seconds"] > 1.5 for s in hybrid)   # both workers' time
    config = json.loads((to / "config.json").read_text())
    assert config["hybrid"]["policies"]["extract"] == "union"
    assert "hybrid" in (to / "report.md").read_text()

    cli = subprocess.run([sys.executable, "eval/studies/hybrid.py", "--out", str(out), "--model",
                          "oracle", "--to", str(tmp_path / "cli"), "--extract", "fill",
                          "--resamples", "100"], cwd=ROOT, capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert (tmp_path / "cli" / "summary.json").is_file()


@pytest.mark.parametrize("args, message", [
    (["--model", "nope"], "no samples of arm 'nope'"),
    (["--model", "oracle", "--name", "rules"], "already an arm's"),
])
def test_bad_requests_get_a_clear_error(tiny_corpus, tmp_path, args, message):
    out = tmp_path / "ev"
    assert eval_main(["--arm", "rules", "--set", "val", "--corpus", str(tiny_corpus),
                      "--out", str(out), "--no-progress", "--no-plots"]) == 0
    _oracle_samples(tiny_corpus, out)
    cli = subprocess.run([sys.executable, "eval/studies/hybrid.py", "--out", str(out), "--to",
                          str(tmp_path / "x"), *args], cwd=ROOT, capture_output=True, text=True)
    assert cli.returncode == 2 and message in cli.stderr
    none = subprocess.run([sys.executable, "eval/studies/hybrid.py", "--out", str(tmp_path),
                           "--model", "m", "--to", str(tmp_path / "y")], cwd=ROOT,
                          capture_output=True, text=True)
    assert none.returncode == 2 and "no config.json" in none.stderr


def test_derived_reads_the_choices_from_the_models_own_text(tiny_corpus, tmp_path):
    """`--consolidate derived --reflect derived` on samples of an older wire (ids written by the
    model, in the canonical shape): a model that states the gold text but writes the wrong ids
    (here: the gold with its citations and supports replaced) gets them right once they are
    read from its text; as it is, it does not. On a wire v4 sample (text only) it is the model's
    answer as the codec already read it."""
    from memworker.eval.studies.rowtools import text_only

    out = tmp_path / "ev"
    assert eval_main(["--arm", "rules", "--set", "val", "--corpus", str(tiny_corpus),
                      "--out", str(out), "--no-progress", "--no-plots"]) == 0
    _oracle_samples(tiny_corpus, out)
    samples = runner.read_samples(out / runner.SAMPLES)
    rows = {r["id"]: r for r in runner.load_eval_rows(tiny_corpus, "val")}
    with open(out / runner.SAMPLES, "wb") as fh:   # the oracle writes wrong ids
        for s in samples:
            wrong = None
            gold = s["output"]
            if s["arm"] == "oracle" and s["task"] == "reflect" and gold["citations"]:
                wrong = {**gold, "citations": [], "insufficient_evidence": True}
            if s["arm"] == "oracle" and s["task"] == "consolidate" and gold["observations"]:
                ids = [f["id"] for f in rows[s["id"]]["input"]["facts"]]
                wrong = {"observations": [{**o, "supports": ids[:2] if sorted(o["supports"]) !=
                                           sorted(ids[:2]) else ids[1:3]}
                                          for o in gold["observations"]]}
            if wrong is not None:  # an older wire's sample: its wire held the written ids
                result = codec.decode(s["task"], rows[s["id"]]["input"], json.dumps(wrong))
                s = {**s, "wire": wrong, "output": result.output}
                s["verdicts"] = runner.grade_sample(rows[s["id"]], s)
            fh.write(canonical_json(s) + b"\n")
    policies = {"extract": "model", "consolidate": "derived", "reflect": "derived"}
    summary = compose(out, "oracle", tmp_path / "hy", policies, resamples=200)
    for task, metric in (("consolidate", "consolidate_correct"), ("reflect", "reflect_citations")):
        m = _metric(summary, "hybrid", task, metric)
        assert m["num"] == m["den"] > 0, (task, m)
        as_is = _metric(summary, "oracle", task, metric)
        assert as_is["num"] < as_is["den"], (task, as_is)   # the written ids were wrong
    derived = [s for s in runner.read_samples(tmp_path / "hy" / runner.SAMPLES)
               if s["arm"] == "hybrid" and s["task"] == "reflect"]
    for s in derived:   # the derived citations are the gold's, read from the answer
        assert s["output"]["citations"] == rows[s["id"]]["gold"]["citations"]
        assert s["wire"] == {"answer": s["output"]["answer"]}
    # a wire v4 sample is already text only; an older one loses its ids
    assert text_only("reflect", {"answer": "x"}) == {"answer": "x"}
    assert text_only("reflect", {"insufficient_evidence": False, "citations": ["E1"],
                                 "answer": "x"}) == {"answer": "x"}
    assert text_only("consolidate", {"observations": ["s"]}) == {"observations": ["s"]}
    assert text_only("consolidate", {"observations": [{"supports": ["A", "B"],
                                                       "statement": "s"}]}) == {
        "observations": ["s"]}
