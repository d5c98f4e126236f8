"""The live scenarios: the development set (`scenarios_dev.yaml`, chosen on) beside the test set
(`scenarios.yaml`, the release is gated on it): both load, share no person, place, value or
sentence, use ontology predicates only, and every expected date is what the product's own rule
(`memworker.temporal`) resolves the session's time expression to."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memworker import ontology, temporal
from memworker.eval.live.cli import main
from memworker.eval.live.scenarios import DEFAULT_SCENARIOS, load_scenarios

DEV = DEFAULT_SCENARIOS.with_name("scenarios_dev.yaml")
FILES = {"test": DEFAULT_SCENARIOS, "dev": DEV}


def _facts(scenario):
    for session in scenario["sessions"]:
        for fact in session["facts"]:
            yield session, fact
    yield from ((None, f) for f in (scenario.get("final") or {}).get("current", []))


def _values(scenarios) -> set[str]:
    out = set()
    for s in scenarios:
        for _, fact in _facts(s):
            for key in ("value", "subject"):
                if isinstance(fact.get(key), str) and fact[key] != "the user":
                    out.add(fact[key].lower())
    return out


def _sentences(scenarios) -> set[str]:
    return {m["content"].strip().lower() for s in scenarios for sess in s["sessions"]
            for m in sess["messages"]}


def test_the_dev_set_loads_and_shares_nothing_with_the_test_set():
    test, dev = load_scenarios(DEFAULT_SCENARIOS), load_scenarios(DEV)
    assert len(dev) >= 16
    assert not {s["name"] for s in test} & {s["name"] for s in dev}
    assert not _values(test) & _values(dev)
    assert not _sentences(test) & _sentences(dev)
    dev_text = " ".join(_sentences(dev))
    for value in _values(test):
        assert not re.search(rf"\b{re.escape(value)}\b", dev_text), value
    # the same kinds of behaviour: every check of the test set is exercised by the dev set
    assert {c for s in test for c in s["checks"]} <= {c for s in dev for c in s["checks"]}


@pytest.mark.parametrize("which", sorted(FILES))
def test_predicates_and_expected_dates_follow_the_product(which):
    dated = 0
    for s in load_scenarios(FILES[which]):
        for session, fact in _facts(s):
            if fact.get("predicate"):
                assert fact["predicate"] in ontology.PREDICATES, (s["name"], fact)
            if session is None or "date" not in fact:
                continue
            text = " ".join(m["content"] for m in session["messages"] if m["role"] == "user")
            resolved = {temporal.resolve(e, session["at"]).date
                        for e in temporal.find_expressions(text, session["at"])}
            assert fact["date"] in resolved, (s["name"], fact["date"], resolved)
            dated += 1
    assert dated >= 1


def test_the_rules_arm_runs_the_dev_set(tmp_path):
    out = tmp_path / "live"
    assert main(["--arm", "rules", "--scenarios", str(DEV), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["arms"]["rules"]["total"] == len(load_scenarios(DEV))
    for name, r in summary["arms"]["rules"]["scenarios"].items():
        for check in ("identity", "no_secret", "injection_inert", "rejected_not_stored"):
            assert r["checks"].get(check, True), (name, check, r["why"])


def test_the_dev_file_ships_with_the_package():
    assert Path(DEV).is_file() and DEV.parent == DEFAULT_SCENARIOS.parent
