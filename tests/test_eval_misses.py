"""eval/studies/misses.py: which required facts an arm covers, by kind, subject, behaviour and
predicate, counted as the grader counts coverage (its `facts_covered`)."""

from __future__ import annotations

import json

from memworker.eval.cli import main as eval_main
from memworker.eval.grade import grade_extract
from memworker.eval.studies.misses import main, misses
from tests.test_eval_grade import EXTRACT, PORTO, claim
from tests.test_eval_hybrid import _oracle_samples


def test_the_grader_names_the_facts_a_supported_claim_covered():
    got = grade_extract(EXTRACT, {"claims": [claim(PORTO), claim(PORTO)]})
    facts = EXTRACT["truth"]["facts"]
    assert [facts[i]["value"] for i in got["facts_covered"]] == ["Porto"]
    assert got["counts"]["duplicate"] == 1            # the repeat covers nothing more
    assert grade_extract(EXTRACT, {"claims": []})["facts_covered"] == []


def test_each_group_sums_to_the_coverage_of_the_evaluation(tiny_corpus, tmp_path, capsys):
    out = tmp_path / "ev"
    assert eval_main(["--arm", "rules", "--set", "val", "--corpus", str(tiny_corpus), "--out",
                      str(out), "--no-progress", "--no-plots"]) == 0
    _oracle_samples(tiny_corpus, out)
    summary = json.loads((out / "summary.json").read_text())
    coverage = summary["metrics"]["rules"]["extract"]["metrics"]["extract_coverage"]
    assert main(["--out", str(out), "--model", "rules", "--json", str(tmp_path / "m.json")]) == 0
    printed = capsys.readouterr().out
    figures = json.loads((tmp_path / "m.json").read_text())
    for by, cells in figures.items():   # every grouping counts the same facts
        assert [sum(c[0] for c in cells.values()), sum(c[1] for c in cells.values())] == \
            [coverage["num"], coverage["den"]], by
    assert f"required facts covered: {coverage['num']:g}/{coverage['den']:g}" in printed
    assert main(["--out", str(out), "--model", "oracle", "--json", str(tmp_path / "o.json")]) == 0
    oracle = json.loads((tmp_path / "o.json").read_text())
    assert all(c[0] == c[1] for cells in oracle.values() for c in cells.values())   # the gold
    assert main(["--out", str(out), "--model", "nobody"]) == 2
    assert "no extract samples of arm 'nobody'" in capsys.readouterr().err
    assert set(misses({}, [])) == {"kind", "subject", "behaviour", "predicate"}
