"""Scripted live-acceptance scenarios: loading, validation, and the fact matcher.

A scenario file (default: `scenarios.yaml` next to this module) holds `scenarios:`, a list of:

| key | meaning |
|---|---|
| `name`, `domain`, `what` | identity and a one-line description |
| `sessions` | list of {`id`, `at` (ISO time with offset), `messages` [{role, content, timestamp?}], `injection` (bool: this session carries an injected instruction in tool text), `expect` {`facts`: [fact spec, optional `supersedes`: fact spec]}} |
| `consolidate` | optional {`at`}: one consolidate call after the sessions |
| `questions` | list of {`ask`, `at`, `expect` (list of groups; the answer must mention one word/phrase of every group), `forbid` (phrases the answer must not mention), `abstain` (bool)} |
| `final` | {`current`: fact specs that must be active at the end, `superseded`: fact specs that must be history} |
| `secrets`, `injected`, `rejected` | strings that must never be stored (secrets: anywhere in the store's files; injected / rejected: in no memory, entity or reflection) |
| `checks` | the checks that apply (`memworker.eval.live.checks.CHECKS`) |

A fact spec is {`subject`, `relation`?, `predicate`?, `value`?, `kind`?, `date`?}; `fact_matches`
says when a stored memory or an extract candidate matches it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from memworker import temporal
from memworker.eval.grade import predicate_match, subject_match
from memworker.textnorm import mentions, norm

DEFAULT_SCENARIOS = Path(__file__).with_name("scenarios.yaml")
CHECK_NAMES = ("current", "supersession", "observation", "reflection", "no_secret",
               "injection_inert", "rejected_not_stored", "identity")
_SCENARIO_KEYS = {"name", "domain", "what", "sessions", "consolidate", "questions", "final",
                  "secrets", "injected", "rejected", "checks"}
_SESSION_KEYS = {"id", "at", "messages", "injection", "expect"}
_QUESTION_KEYS = {"ask", "at", "expect", "forbid", "abstain"}
_FACT_KEYS = {"subject", "relation", "predicate", "value", "kind", "date", "supersedes"}


class ScenarioError(ValueError):
    """A scenario file does not follow the format; the message names the place."""


def _keys(obj: Any, allowed: set[str], where: str, required: tuple[str, ...] = ()) -> None:
    if not isinstance(obj, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {type(obj).__name__}")
    unknown = set(obj) - allowed
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: "
                            f"{sorted(allowed)}")
    missing = [k for k in required if k not in obj]
    if missing:
        raise ScenarioError(f"{where}: missing {missing}")


def _time(value: Any, where: str) -> str:
    try:
        return temporal.parse_timestamp(str(value), where).isoformat(timespec="seconds")
    except (ValueError, TypeError) as exc:
        raise ScenarioError(f"{where}: {exc}") from None


def _fact(spec: Any, where: str, nested: bool = True) -> dict[str, Any]:
    _keys(spec, _FACT_KEYS if nested else _FACT_KEYS - {"supersedes"}, where, ("subject",))
    out = {k: (str(v) if k != "supersedes" else v) for k, v in spec.items()}
    if "supersedes" in out:
        out["supersedes"] = _fact(out["supersedes"], f"{where}/supersedes", nested=False)
    return out


def _scenario(doc: Any, n: int) -> dict[str, Any]:
    where = f"scenarios[{n}]"
    _keys(doc, _SCENARIO_KEYS, where, ("name", "sessions", "checks"))
    where = f"scenario {doc['name']}"
    checks = list(doc["checks"])
    bad = [c for c in checks if c not in CHECK_NAMES]
    if bad or not checks:
        raise ScenarioError(f"{where}: checks must be a non-empty list of {CHECK_NAMES}, got "
                            f"{checks}")
    sessions = []
    for k, s in enumerate(doc["sessions"]):
        sw = f"{where} sessions[{k}]"
        _keys(s, _SESSION_KEYS, sw, ("id", "at", "messages"))
        expect = s.get("expect") or {}
        _keys(expect, {"facts"}, f"{sw}/expect")
        messages = []
        for m, msg in enumerate(s["messages"]):
            _keys(msg, {"role", "content", "timestamp"}, f"{sw} messages[{m}]",
                  ("role", "content"))
            if msg["role"] not in ("user", "assistant", "tool"):
                raise ScenarioError(f"{sw} messages[{m}]: role must be user, assistant or tool")
            messages.append(dict(msg))
        sessions.append({"id": str(s["id"]), "at": _time(s["at"], f"{sw}/at"),
                         "messages": messages, "injection": bool(s.get("injection", False)),
                         "facts": [_fact(f, f"{sw}/expect/facts[{i}]")
                                   for i, f in enumerate(expect.get("facts") or [])]})
    questions = []
    for k, q in enumerate(doc.get("questions") or []):
        qw = f"{where} questions[{k}]"
        _keys(q, _QUESTION_KEYS, qw, ("ask", "at"))
        groups = [[str(x) for x in g] for g in q.get("expect") or []]
        if bool(q.get("abstain")) == bool(groups):
            raise ScenarioError(f"{qw}: give either expect (answer groups) or abstain: true")
        questions.append({"ask": str(q["ask"]), "at": _time(q["at"], f"{qw}/at"),
                          "expect": groups, "forbid": [str(x) for x in q.get("forbid") or []],
                          "abstain": bool(q.get("abstain", False))})
    final = doc.get("final") or {}
    _keys(final, {"current", "superseded"}, f"{where}/final")
    consolidate = doc.get("consolidate")
    if consolidate is not None:
        _keys(consolidate, {"at"}, f"{where}/consolidate", ("at",))
        consolidate = {"at": _time(consolidate["at"], f"{where}/consolidate/at")}
    out = {"name": str(doc["name"]), "domain": str(doc.get("domain", "")),
           "what": str(doc.get("what", "")), "sessions": sessions, "consolidate": consolidate,
           "questions": questions,
           "current": [_fact(f, f"{where}/final/current", nested=False)
                       for f in final.get("current") or []],
           "superseded": [_fact(f, f"{where}/final/superseded", nested=False)
                          for f in final.get("superseded") or []],
           "secrets": [str(x) for x in doc.get("secrets") or []],
           "injected": [str(x) for x in doc.get("injected") or []],
           "rejected": [str(x) for x in doc.get("rejected") or []],
           "checks": checks}
    needs = {"supersession": out["superseded"], "observation": consolidate,
             "reflection": questions, "no_secret": out["secrets"],
             "injection_inert": out["injected"] and any(s["injection"] for s in sessions),
             "rejected_not_stored": out["rejected"], "current": out["current"]}
    for check in checks:
        if check in needs and not needs[check]:
            raise ScenarioError(f"{where}: check {check!r} needs data the scenario does not give "
                                "(superseded facts, consolidate, questions, secrets, an injection "
                                "session with injected strings, rejected strings, current facts)")
    return out


def load_scenarios(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The validated scenarios of a YAML file (default: the packaged `scenarios.yaml`)."""
    path = Path(path) if path is not None else DEFAULT_SCENARIOS
    if not path.is_file():
        raise ScenarioError(f"scenario file not found: {path}")
    doc = yaml.safe_load(path.read_text("utf-8"))
    if not isinstance(doc, dict) or not isinstance(doc.get("scenarios"), list):
        raise ScenarioError(f"{path}: expected a mapping with a 'scenarios' list")
    scenarios = [_scenario(s, n) for n, s in enumerate(doc["scenarios"])]
    names = [s["name"] for s in scenarios]
    if len(set(names)) != len(names):
        raise ScenarioError(f"{path}: scenario names must be unique, got {names}")
    return scenarios


# --- matching -------------------------------------------------------------------------------------

def _value_ok(have: str | None, want: str) -> bool:
    if have is None:
        return False
    a, b = norm(have), norm(want)
    for article in ("the ", "a ", "an "):
        a = a[len(article):] if a.startswith(article) else a
    return a == b or mentions(have, want)


def fact_matches(item: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Does a memory row or extract candidate (keys subject / entities, predicate, value, kind,
    event_date) match a fact spec?"""
    subject = item.get("subject")
    if subject is None and item.get("entities"):
        subject = item["entities"][0]["name"]
    if not subject or not subject_match(subject, spec["subject"]):
        return False
    if "relation" in spec and not mentions(subject, spec["relation"]):
        return False
    if "predicate" in spec and not (item.get("predicate")
                                    and predicate_match(item["predicate"], spec["predicate"])):
        return False
    if "value" in spec and not _value_ok(item.get("value"), spec["value"]):
        return False
    if "kind" in spec and item.get("kind") != spec["kind"]:
        return False
    return not ("date" in spec and item.get("event_date") != spec["date"])
