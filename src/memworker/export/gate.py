"""The release gate (issue 15): a student must not be worse than its base, nor than the rules
baseline at extraction support, unless the release receipt records a reasoned waiver.

Read from the release receipt's `evaluation` (one evaluator summary per set, `eval/run.py
--into-receipt`), for every set that holds the comparison:

- **student vs base**, each task's main metric (`memworker.eval.grade.PRIMARY`: extract_f1,
  consolidate_correct, reflect_correct): fails when the paired student - base 95 % bootstrap
  interval (episodes resampled) lies entirely below 0, i.e. the student is worse beyond the
  interval;
- **student vs rules**, extraction support (`extract_support`): fails when the student's support
  is below the rules arm's (the point difference student - rules < 0; the rules arm is a floor,
  so no interval slack is given; the interval is recorded beside it).

A failing check passes only with a waiver in the receipt, `gate.waivers: [{"metric", "set",
"reason"}]`, naming the gated metric and set, with a non-empty reason (`record_waiver`, or
`python export/run.py --out release --waive SET METRIC "REASON"`). A waiver with an empty reason,
or one naming a metric the gate does not check, is refused.

A release whose receipt holds no evaluation cannot be gated: verification fails with a one-line
message naming the evaluator command, unless `allow_unevaluated` (`--allow-unevaluated`). A
release without a student (base only) has nothing to gate. The evaluation must hold a student -
base comparison and a student - rules comparison in at least one set each (otherwise the gate says
which arm to add). `evaluate` gives the verdict and per-check figures that the receipt's `gate`
records (written whenever the release is signed: export, `record_evaluation`, `record_waiver`);
verification recomputes it from the evaluation and the waivers, never trusting a stored verdict.
"""

from __future__ import annotations

from typing import Any

from memworker.eval.grade import PRIMARY

RULES_METRIC = ("extract", "extract_support")
GATED_METRICS = {*PRIMARY.values(), RULES_METRIC[1]}
RULE = ("student - base on each task's main metric (" + ", ".join(
    f"{t}: {m}" for t, m in PRIMARY.items()) + "): fail when the paired 95 % bootstrap interval "
    "lies entirely below 0; student - rules on extract_support: fail when below 0; a failing "
    "check passes only with a waiver {metric, set, reason} in gate.waivers")
EVAL_COMMAND = ("python eval/run.py --arm base=release/base-q8_0.gguf "
                "--arm student=release/<student>.gguf --arm rules --set heldout "
                "--into-receipt receipts/release-receipt.json --release release")


class WaiverError(ValueError):
    """A waiver that cannot be recorded (empty reason, unknown metric or set)."""


def waiver_problems(waivers: Any) -> list[str]:
    """Why the recorded waivers are not acceptable (empty when they are)."""
    if waivers is None:
        return []
    if not isinstance(waivers, list):
        return ["gate.waivers must be a list of {metric, set, reason}"]
    out = []
    for n, w in enumerate(waivers):
        if not isinstance(w, dict) or set(w) != {"metric", "set", "reason"}:
            out.append(f"gate.waivers[{n}] must be exactly {{metric, set, reason}}")
            continue
        if w["metric"] not in GATED_METRICS:
            out.append(f"gate.waivers[{n}]: {w['metric']!r} is not a gated metric "
                       f"({', '.join(sorted(GATED_METRICS))})")
        if not isinstance(w["set"], str) or not w["set"]:
            out.append(f"gate.waivers[{n}]: set must name an evaluated set")
        if not isinstance(w["reason"], str) or not w["reason"].strip():
            out.append(f"gate.waivers[{n}] ({w['metric']} on {w['set']}): the reason is empty; "
                       "a waiver must say why the release ships anyway")
    return out


def _comparison(summary: Any, a: str, b: str) -> dict[str, Any] | None:
    if not isinstance(summary, dict):
        return None
    for comp in summary.get("comparisons") or []:
        if comp.get("a") == a and comp.get("b") == b:
            return comp
    return None


def _figures(item: dict[str, Any] | None) -> dict[str, Any]:
    item = item or {}
    return {"student": item.get("a"), "reference": item.get("b"), "diff": item.get("diff"),
            "ci": item.get("ci"), "n_rows": item.get("n_rows"),
            "n_episodes": item.get("n_episodes")}


def _check(set_name: str, versus: str, task: str, metric: str,
           item: dict[str, Any] | None) -> dict[str, Any]:
    fig = _figures(item)
    if item is None or fig["diff"] is None:
        status = "not measured"
    elif versus == "base":
        status = "fail" if fig["ci"] is not None and fig["ci"][1] < 0 else "ok"
    else:
        status = "fail" if fig["diff"] < 0 else "ok"
    return {"set": set_name, "versus": versus, "task": task, "metric": metric,
            "status": status, **fig}


def evaluate(receipt: dict[str, Any]) -> dict[str, Any]:
    """The gate record of a release receipt: verdict (pass, fail, unevaluated, not applicable),
    the rule, every check with its figures and status, the waivers, and the problems."""
    old = receipt.get("gate") if isinstance(receipt.get("gate"), dict) else {}
    waivers = old.get("waivers") or []
    record: dict[str, Any] = {"rule": RULE, "waivers": waivers, "checks": [], "problems": []}
    record["problems"] += waiver_problems(waivers)
    if not isinstance(waivers, list):
        waivers = []
    if not receipt.get("student"):
        return {**record, "verdict": "not applicable"}
    evaluation = receipt.get("evaluation")
    if not isinstance(evaluation, dict) or not evaluation:
        record["problems"].append(
            f"the release is not evaluated, so the release gate cannot run: `{EVAL_COMMAND}` "
            "(or verify with --allow-unevaluated)")
        return {**record, "verdict": "unevaluated"}
    checks = record["checks"]
    for set_name, summary in sorted(evaluation.items()):
        base = _comparison(summary, "student", "base")
        if base is not None:
            for task, metric in PRIMARY.items():
                item = ((base.get("tasks") or {}).get(task) or {}).get(metric)
                checks.append(_check(set_name, "base", task, metric, item))
        rules = _comparison(summary, "student", "rules")
        if rules is not None:
            task, metric = RULES_METRIC
            item = ((rules.get("tasks") or {}).get(task) or {}).get(metric)
            checks.append(_check(set_name, "rules", task, metric, item))
    for versus, arm in (("base", "--arm base=release/base-q8_0.gguf"), ("rules", "--arm rules")):
        if not any(c["versus"] == versus for c in checks):
            record["problems"].append(
                f"no evaluated set compares the student with the {versus} arm: add `{arm}` to "
                f"`{EVAL_COMMAND.split(' --arm')[0]} …` and merge it with --into-receipt")
    valid = {(w["metric"], w["set"]) for w in waivers if isinstance(w, dict)
             and not waiver_problems([w])}
    for c in checks:
        if c["status"] == "fail" and (c["metric"], c["set"]) in valid:
            c["status"] = "waived"
            c["waiver"] = next(w["reason"] for w in waivers
                               if (w["metric"], w["set"]) == (c["metric"], c["set"]))
        if c["status"] == "fail":
            record["problems"].append(describe(c))
    verdict = "fail" if record["problems"] else "pass"
    return {**record, "verdict": verdict}


def describe(check: dict[str, Any]) -> str:
    """One line for a failing check, naming task, metric and set, with its figures."""
    ci = check["ci"]
    interval = "–" if ci is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"
    worse = ("beyond its 95 % interval" if check["versus"] == "base" else "(below the rules floor)")
    return (f"release gate: the student is worse than {check['versus']} on {check['task']} "
            f"{check['metric']} in set {check['set']} {worse}: student {check['student']:.3f} vs "
            f"{check['versus']} {check['reference']:.3f}, difference {check['diff']:+.3f} "
            f"{interval} (n={check['n_rows']} rows); fix the student, or record a reasoned "
            f"waiver: python export/run.py --out release --waive {check['set']} "
            f"{check['metric']} \"REASON\"")


def coverage(receipt: dict[str, Any]) -> list[str]:
    """Per evaluated set, how many of its rows the gated evaluation ran ("heldout: evaluated on
    the first 16 of the 64 held-out rows (not the full evaluation)"). The gate reads a limited
    evaluation exactly like a full one, so whoever reads its verdict must see n."""
    from memworker.eval.summary import coverage_line

    evaluation = receipt.get("evaluation")
    if not isinstance(evaluation, dict):
        return []
    out = []
    for set_name, summary in sorted(evaluation.items()):
        if isinstance(summary, dict) and isinstance(summary.get("rows"), int):
            line = f"{set_name}: evaluated on {coverage_line(summary)}"
            if "not the full evaluation" in line:
                line += ", gated like a full one"
            out.append(line)
    return out


def problems(receipt: dict[str, Any], *, allow_unevaluated: bool = False) -> list[str]:
    """What verification reports for the gate (empty when it passes)."""
    record = evaluate(receipt)
    if record["verdict"] == "unevaluated" and allow_unevaluated:
        return waiver_problems(record["waivers"])
    return record["problems"]


def add_waiver(receipt: dict[str, Any], set_name: str, metric: str, reason: str) -> dict[str, Any]:
    """The receipt's gate with one waiver added (replacing one for the same metric and set);
    raises WaiverError for an empty reason, an ungated metric or a set not evaluated."""
    waiver = {"metric": metric, "set": set_name, "reason": (reason or "").strip()}
    bad = waiver_problems([waiver])
    if bad:
        raise WaiverError(bad[0].replace("gate.waivers[0]", "waiver"))
    if set_name not in (receipt.get("evaluation") or {}):
        raise WaiverError(f"waiver: set {set_name!r} is not evaluated in this release "
                          f"(evaluated: {', '.join(sorted(receipt.get('evaluation') or {})) or 'none'})")
    old = receipt.get("gate") if isinstance(receipt.get("gate"), dict) else {}
    waivers = [w for w in old.get("waivers") or []
               if not (isinstance(w, dict) and (w.get("metric"), w.get("set")) == (metric,
                                                                                  set_name))]
    return {**old, "waivers": [*waivers, waiver]}
