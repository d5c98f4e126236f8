"""The release gate (issue 15 item 4, issue 26 item 2): a student must not be worse than its base
on any task, must be above the rules baseline at extraction (support and coverage) and not below
it at consolidation and reflection, unless the release receipt records a reasoned waiver.

Read from the release receipt's `evaluation` (one evaluator summary per set, `eval/run.py
--into-receipt`). Every set whose summary holds the comparison is gated (held-out and test, which
the issue names, and any other evaluated set such as natural), each check on the paired
difference and its 95 % bootstrap interval (episodes resampled) as the evaluator's summary stores
them (`comparisons`: `{"a": "student", "b": "base"|"rules", "tasks": {task: {metric: {"a", "b",
"diff", "ci", "n_rows", "n_episodes"}}}}`, every metric of every task, `memworker.eval.summary`):

- **not below base** (student - base), each task's main metric (`memworker.eval.grade.PRIMARY`:
  extract_f1, consolidate_correct, reflect_correct): fails when the interval lies entirely below
  0, i.e. the student is worse beyond the interval;
- **above rules** (student - rules), extract_support and extract_coverage: fails unless the
  interval lies entirely above 0 (a lower bound <= 0 fails, so does an interval that could not be
  computed): the rules arm is a regex, and a worker that does not beat it at extraction is not
  worth shipping for it;
- **not below rules** (student - rules), consolidate_correct and reflect_correct: fails when the
  interval lies entirely below 0.

One exception by set (`NOT_BELOW_SETS`): on the hand-written natural set, extract_support and
extract_coverage are checked "not below rules" instead of "above rules". That is the bar the
issue sets there ("on the natural set the student is not below the rules on extract support and
coverage"), and where no arm, the rules included, has a supported claim (0/12 in the committed
release), "above" could never pass, so a release that met the issue would need a waiver.

One exception by figures (`reach`): the evaluator's summary gives, beside each student - rules
extract_support and extract_coverage difference, the interval an arm writing exactly the gold
would get against the rules on the same rows and resamples (`memworker.eval.summary
.paired_metric`); no arm can show more. Where that interval's lower bound is not above 0, "above
rules" is unattainable on the set, for any student: on the held-out set the rules write 10 extract
claims in 9 of 32 episodes, 8 supported, so a resample holds only supported rules claims often
enough that the gold itself gets [0.000, +0.444] on support (the test split's 81 rules claims give
the gold [+0.183, +0.400]). Such a check is judged "not below rules" instead and records
`unattainable` with the interval, so the receipt says that the set cannot show it, rather than
failing every release or needing a waiver. A summary without `reach` (older evaluations) is
judged as before.

A gated set's summary must measure what it gates: when a student - rules comparison has rows of a
task but no figure for one of its gated metrics (the metric is absent, or its difference is
undefined, e.g. an arm wrote no claim so its support has no denominator), that check has status
`missing` and fails like a failing check, naming the comparison; a task with no rows in a set is
`not measured` there (no failure). Every student - rules check must be measured in at least one
set, and at least one set must compare the student with each arm (otherwise the gate says which
arm or comparison to add). A student - base check without figures stays `not measured`, as it
always was.

A failing (or missing) check passes only with a waiver in the receipt, `gate.waivers:
[{"metric", "set", "reason"}]`, naming the gated metric and set, with a non-empty reason
(`record_waiver`, or `python export/run.py --out release --waive SET METRIC "REASON"`). A waiver
covers every check of that metric in that set (consolidate_correct and reflect_correct are
checked against both arms, so one waiver covers both). A waiver with an empty reason, or one
naming a metric the gate does not check, is refused.

A release whose receipt holds no evaluation cannot be gated: verification fails with a one-line
message naming the evaluator command, unless `allow_unevaluated` (`--allow-unevaluated`). A
release without a student (base only) has nothing to gate. `evaluate` gives the verdict, every
check with its figures, and per set and task whether it passes (`tasks`: pass, fail, waived or
not measured), which the receipt's `gate` records (written whenever the release is signed:
export, `record_evaluation`, `record_waiver`); verification recomputes it from the evaluation and
the waivers, never trusting a stored verdict.

**Release format 2** (issue 50 item 2; `release.FORMAT`, recorded in the receipt's `format`): a
receipt of format 2 or later is gated as above with two changes, and a format-1 receipt (releases
v1–v3) exactly as before, so that a committed release still verifies as it was released:

- the natural set is no longer an exception: extract_support and extract_coverage must be
  **above rules** there too, or "not below" where its `reach` says above is unattainable;
- **live acceptance** (`eval/live.py`, recorded in the receipt's `live` by `record_live`) is
  gated: the student must pass at least as many of the store's scenarios as the rules arm
  (metric `live_passed`, set `live`); a receipt without it fails with the command that records
  it.

Sets in `REPORTED_SETS` (natural-dev: designs and thresholds are chosen on it) are reported in
the receipt and the card but never gated, in any format.
"""

from __future__ import annotations

from typing import Any

from memworker.eval.grade import PRIMARY
from memworker.eval.summary import coverage_line

ABOVE, NOT_BELOW = "above", "not below"
#: student - rules checks: (task, metric, requirement): ABOVE: the paired 95 % interval lies
#: entirely above 0; NOT_BELOW: it does not lie entirely below 0
RULES_CHECKS = (("extract", "extract_support", ABOVE), ("extract", "extract_coverage", ABOVE),
                ("consolidate", "consolidate_correct", NOT_BELOW),
                ("reflect", "reflect_correct", NOT_BELOW))
#: sets where the ABOVE checks are NOT_BELOW (the issue's bar for the hand-written natural set),
#: in releases of format 1 only
NOT_BELOW_SETS = frozenset({"natural"})
#: evaluated sets that are reported, never gated (chosen on: a gate there would grade itself)
REPORTED_SETS = frozenset({"natural-dev"})
#: the first receipt format whose gate holds the natural set above the rules and gates live
#: acceptance
LIVE_FORMAT = 2
LIVE_SET, LIVE_METRIC = "live", "live_passed"
GATED_METRICS = {*PRIMARY.values(), *(m for _, m, _ in RULES_CHECKS), LIVE_METRIC}
RULE = ("not below base: student - base on each task's main metric (" + ", ".join(
    f"{t}: {m}" for t, m in PRIMARY.items()) + ") fails when the paired 95 % bootstrap interval "
    "lies entirely below 0; above rules: student - rules on " + ", ".join(
        m for _, m, r in RULES_CHECKS if r == ABOVE) + " fails unless the interval lies entirely "
    "above 0 (on the natural set, and where even an arm writing exactly the gold would not be "
    "above 0 on the set's rows: not below rules instead); not below rules: student - rules on "
    + ", ".join(m for _, m, r in RULES_CHECKS if r == NOT_BELOW) + " fails when the interval "
    "lies entirely below 0; a student - rules metric without a figure in a set that has its "
    "task's rows fails as missing; a failing check passes only with a waiver {metric, set, "
    "reason} in gate.waivers")
#: what a receipt of format LIVE_FORMAT or later adds to RULE
RULE_LIVE = (RULE.replace("(on the natural set, and where", "(where") + "; natural-dev is "
             "reported, not gated; live acceptance: the student must pass at least as many "
             "scenarios as the rules arm (" + LIVE_METRIC + ")")
LIVE_COMMAND = ("python eval/live.py --arm base=release/base-q8_0.gguf "
                "--arm student=release/<student>.gguf --arm rules --out receipts/live "
                "--into-receipt receipts/release-receipt.json --release release")
EVAL_COMMAND = ("python eval/run.py --arm base=release/base-q8_0.gguf "
                "--arm student=release/<student>.gguf --arm rules --set heldout "
                "--into-receipt receipts/release-receipt.json --release release")
#: a failing status of a check (a waiver turns either into "waived")
FAILING = ("fail", "missing")


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


def comparison(summary: Any, a: str, b: str) -> dict[str, Any] | None:
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


def _check(set_name: str, versus: str, task: str, metric: str, requirement: str,
           comparison: dict[str, Any]) -> dict[str, Any]:
    """One check of one set: its figures and status (ok, fail, missing, not measured)."""
    block = (comparison.get("tasks") or {}).get(task)
    item = block.get(metric) if isinstance(block, dict) else None
    fig = _figures(item if isinstance(item, dict) else None)
    ci = fig["ci"]
    reach = item.get("reach") if isinstance(item, dict) else None
    unattainable = (requirement == ABOVE and isinstance(reach, list) and len(reach) == 2
                    and reach[0] <= 0)
    if unattainable:
        requirement = NOT_BELOW
    if not isinstance(block, dict):
        status = "not measured"  # no rows of this task in the set
    elif fig["diff"] is None:
        # the task has rows but no difference: the base check stays as lenient as it always
        # was; a rules check must be measured wherever its task was evaluated
        status = "not measured" if versus == "base" else "missing"
    elif requirement == ABOVE:
        status = "ok" if ci is not None and ci[0] > 0 else "fail"
    else:
        status = "fail" if ci is not None and ci[1] < 0 else "ok"
    check = {"set": set_name, "versus": versus, "task": task, "metric": metric,
             "check": f"{requirement} {versus}", "status": status, **fig}
    if isinstance(reach, list):
        check["reach"] = reach
    if unattainable:
        check["check"] = f"{NOT_BELOW} {versus} (above {versus} unattainable)"
        check["unattainable"] = (
            f"no arm can be shown above {versus} on these rows: one that writes exactly the "
            f"gold gets [{reach[0]:+.3f}, {reach[1]:+.3f}] against it")
    if status == "missing":
        check["missing"] = (f"the student - {versus} comparison holds no {metric}" if item is None
                            else f"the student - {versus} {metric} difference is undefined (an "
                            "arm's ratio has no denominator on these rows)")
    return check


def _task_status(checks: list[dict[str, Any]]) -> str:
    statuses = {c["status"] for c in checks}
    if statuses & set(FAILING):
        return "fail"
    if statuses <= {"not measured"}:
        return "not measured"
    return "waived" if "waived" in statuses else "pass"


def evaluate(receipt: dict[str, Any]) -> dict[str, Any]:
    """The gate record of a release receipt: verdict (pass, fail, unevaluated, not applicable),
    the rule, every check with its figures and status, per set and task whether it passes
    (`tasks`), the waivers, and the problems."""
    old = receipt.get("gate") if isinstance(receipt.get("gate"), dict) else {}
    waivers = old.get("waivers") or []
    live_format = release_format(receipt) >= LIVE_FORMAT
    record: dict[str, Any] = {"rule": RULE_LIVE if live_format else RULE, "waivers": waivers,
                              "checks": [], "tasks": {}, "problems": []}
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
        if set_name in REPORTED_SETS:
            continue
        base = comparison(summary, "student", "base")
        if base is not None:
            for task, metric in PRIMARY.items():
                checks.append(_check(set_name, "base", task, metric, NOT_BELOW, base))
        rules = comparison(summary, "student", "rules")
        if rules is not None:
            for task, metric, requirement in RULES_CHECKS:
                if set_name in NOT_BELOW_SETS and not live_format:
                    requirement = NOT_BELOW
                checks.append(_check(set_name, "rules", task, metric, requirement, rules))
    if live_format:
        checks.append(live_check(receipt.get("live")))
    for versus, arm in (("base", "--arm base=release/base-q8_0.gguf"), ("rules", "--arm rules")):
        if not any(c["versus"] == versus for c in checks):
            record["problems"].append(
                f"no evaluated set compares the student with the {versus} arm: add `{arm}` to "
                f"`{EVAL_COMMAND.split(' --arm')[0]} …` and merge it with --into-receipt")
        elif versus == "rules":
            for task, metric, _ in RULES_CHECKS:
                if all(c["status"] == "not measured" for c in checks
                       if c["versus"] == "rules" and c["metric"] == metric):
                    record["problems"].append(
                        f"release gate: no evaluated set measures student - rules on {task} "
                        f"{metric} (no {task} rows in any set that compares them): evaluate "
                        "a set with every task (`" + EVAL_COMMAND.split(" --arm")[0] + " …`)")
    valid = {(w["metric"], w["set"]) for w in waivers if isinstance(w, dict)
             and not waiver_problems([w])}
    for c in checks:
        if c["status"] in FAILING and (c["metric"], c["set"]) in valid:
            c["status"] = "waived"
            c["waiver"] = next(w["reason"] for w in waivers
                               if (w["metric"], w["set"]) == (c["metric"], c["set"]))
        if c["status"] in FAILING:
            record["problems"].append(describe(c))
    for set_name in sorted({c["set"] for c in checks} - {LIVE_SET}):
        record["tasks"][set_name] = {
            task: _task_status([c for c in checks if c["set"] == set_name and c["task"] == task])
            for task in PRIMARY}
    verdict = "fail" if record["problems"] else "pass"
    return {**record, "verdict": verdict}


def release_format(receipt: dict[str, Any]) -> int:
    """The receipt's `format` (1 where absent or not an integer: the releases before it)."""
    fmt = receipt.get("format")
    return fmt if isinstance(fmt, int) and not isinstance(fmt, bool) else 1


def live_passed(live: Any) -> dict[str, tuple[int, int]]:
    """arm -> (scenarios passed, scenarios) of a live-acceptance summary (`eval/live.py`'s
    `summary.json`: `arms.<arm>.passed` and `.total`); arms without both integers are left out."""
    arms = live.get("arms") if isinstance(live, dict) else None
    out = {}
    for arm, entry in (arms or {}).items():
        if isinstance(entry, dict) and isinstance(entry.get("passed"), int) \
                and isinstance(entry.get("total"), int):
            out[arm] = (entry["passed"], entry["total"])
    return out


def live_check(live: Any) -> dict[str, Any]:
    """The live-acceptance check of a format-2 receipt: the student passes at least as many
    scenarios as the rules arm, on the same scenarios (status ok, fail or missing)."""
    arms = live_passed(live)
    student, rules = arms.get("student"), arms.get("rules")
    check = {"set": LIVE_SET, "versus": "rules", "task": "live", "metric": LIVE_METRIC,
             "check": f"{NOT_BELOW} rules (scenarios passed)",
             "student": student[0] if student else None,
             "reference": rules[0] if rules else None,
             "diff": student[0] - rules[0] if student and rules else None, "ci": None,
             "n_rows": student[1] if student else None, "n_episodes": None}
    if student is None or rules is None:
        check["status"] = "missing"
        check["missing"] = ("the receipt records no live acceptance of the student and the rules"
                            if not arms else "the recorded live acceptance lacks the "
                            + " and the ".join(a for a in ("student", "rules") if a not in arms)
                            + " arm")
    elif student[1] != rules[1]:
        check["status"] = "missing"
        check["missing"] = (f"the student ran {student[1]} scenarios and the rules {rules[1]}: "
                            "they must run the same ones")
    else:
        check["status"] = "ok" if student[0] >= rules[0] else "fail"
    return check


def describe(check: dict[str, Any]) -> str:
    """One line for a failing (or missing) check, naming the check, task, metric and set, with
    its figures and how to waive it."""
    versus, req = check["versus"], check.get("check", f"not below {check['versus']}")
    waive = (f"record a reasoned waiver: python export/run.py --out release --waive "
             f"{check['set']} {check['metric']} \"REASON\"")
    if check["metric"] == LIVE_METRIC:
        if check["status"] == "missing":
            return (f"release gate [{req}]: {check['missing']}: `{LIVE_COMMAND}`, or {waive}")
        return (f"release gate [{req}]: the student passes {check['student']} of "
                f"{check['n_rows']} live-acceptance scenarios and the rules "
                f"{check['reference']}: fix the student, or {waive}")
    if check["status"] == "missing":
        return (f"release gate [{req}]: set {check['set']} has {check['task']} rows but "
                f"{check.get('missing') or 'no figure for ' + check['metric']}, so the check "
                f"cannot be made (student {_num(check['student'])} vs {versus} "
                f"{_num(check['reference'])}, n={_num(check['n_rows'])} rows); evaluate the set "
                f"with an evaluator that records it, or {waive}")
    ci = check["ci"]
    interval = "–" if ci is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"
    if req.startswith(ABOVE + " "):
        what = (f"the student is not above {versus} on {check['task']} {check['metric']} in set "
                f"{check['set']} (the paired 95 % interval must lie entirely above 0)")
    else:
        what = (f"the student is worse than {versus} on {check['task']} {check['metric']} in "
                f"set {check['set']} beyond its 95 % interval")
    return (f"release gate [{req}]: {what}: student {check['student']:.3f} vs {versus} "
            f"{check['reference']:.3f}, difference {check['diff']:+.3f} {interval} "
            f"(n={check['n_rows']} rows); fix the student, or {waive}")


def _num(x: Any) -> str:
    return "–" if not isinstance(x, (int, float)) else (f"{x}" if isinstance(x, int)
                                                        else f"{x:.3f}")


def coverage(receipt: dict[str, Any]) -> list[str]:
    """Per evaluated set, how many of its rows the gated evaluation ran ("heldout: evaluated on
    the first 16 of the 64 held-out rows (not the full evaluation)"). The gate reads a limited
    evaluation exactly like a full one, so whoever reads its verdict must see n."""
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
    evaluated = set(receipt.get("evaluation") or {})
    if release_format(receipt) >= LIVE_FORMAT:
        evaluated.add(LIVE_SET)  # gated whether or not it is recorded
    if set_name not in evaluated:
        raise WaiverError(f"waiver: set {set_name!r} is not evaluated in this release "
                          f"(evaluated: {', '.join(sorted(evaluated)) or 'none'})")
    old = receipt.get("gate") if isinstance(receipt.get("gate"), dict) else {}
    waivers = [w for w in old.get("waivers") or []
               if not (isinstance(w, dict) and (w.get("metric"), w.get("set")) == (metric,
                                                                                  set_name))]
    return {**old, "waivers": [*waivers, waiver]}
