"""The hand-written natural set: conversations written and labelled by hand, frozen as a test-only
corpus (issue 11, item 5).

Source of truth: one YAML file per conversation in `corpus/natural/` (committed). Each file holds
the conversation's events and, written by hand, the rows made from it: extract windows (a range of
events, the facts the store already holds, the gold claims and what must *not* be claimed),
consolidate rows (stored facts and the observations they support) and reflect rows (question,
evidence, answer, citations). Nothing here is generated: the builder only checks the files, turns
them into rows of the corpus canonical format (`id, task, split, domain, family, episode,
behaviours, input, gold, truth`) and freezes them like a corpus split:

    DIR/manifest.json             counts, sha256 of every file and of every source conversation
    DIR/canonical/test.jsonl      canonical rows (gold + truth)
    DIR/wire/test.jsonl           the chat messages, as a trainer would see them (never trained on)

so that `load_rows(DIR, "test", form="canonical")` and `verify_corpus(DIR)` work unchanged. Every
row must pass `memworker.corpus.audit_row` with zero violations as written: the builder never
repairs a hand label, it refuses to freeze and names the file, the row and the violation. One
check is left out: a consolidate or reflect gold need not state its ids in its own words
(`read_back=False`; the model writes only the text and the codec reads the ids from it, wire v4,
so on this set the codec may read other ids than the hand labels: that is measured, not a label
error); the codec must accept such a gold in canonical form, ids kept, unchanged.

File format (YAML; timestamps are strings, `at: "2025-03-03 19:02"` means that local time in the
conversation's `tz`, or a full ISO timestamp with offset):

    id: n01-flat-hunt            # conversation id (file name without .yaml)
    domain: household            # one of the corpus domains
    tz: "+01:00"
    register: "casual, typos"    # free text, documentation only
    events:
      - {i: 0, role: user, at: "2025-03-03 19:02", text: "..."}
      - {i: 1, role: tool, at: "...", text: "..."}            # tool: trusted false by default
      - {i: 2, role: user, at: "...", trusted: false, text: "fwd: ..."}   # forwarded text
    extract:
      - window: [0, 9]                                  # inclusive event indices
        facts: [{id: F1, statement: "...", since: "2024-11-02"}]
        behaviours: [replacement]
        claims:
          - quotes: [[3, "exact candidate span of event 3"]]
            subject: "the user"      # type: person unless given
            predicate: lives_in
            value: "Utrecht"
            statement: "The user lives in Utrecht."
            kind: fact
            time: null               # verbatim time expression; then date + precision by hand
            supersedes: [F1]         # correction = bool(supersedes)
            confidence: high         # high | medium | low
            behaviour: replacement   # optional; believer / exception optional
        other:                       # world-state facts that must not become claims
          - {status: superseded, subject: "the user", predicate: lives_in, value: "Zwolle"}
        forbidden: [{reason: secret, text: "hunter2hunter2"}]
    consolidate:
      - facts: [{id: F1, statement: "..."}, ...]
        observations: [{statement: "... probably ...", supports: [F1, F3], subject: "..."}]
    reflect:
      - question: "..."
        asked_at: "2025-03-20 10:00"
        evidence: [{id: E1, at: "...", text: "..."}]
        answer: "..."
        citations: [E1]              # empty and insufficient: true when the evidence cannot answer
        insufficient: false
        behaviours: [insufficient_evidence]
        stale: ["Zwolle"]            # outdated values the answer must not state
        injected: [E3]               # evidence ids holding injected instructions
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from memworker import contracts, wire
from memworker.corpus import audit as A
from memworker.corpus import tokens as corpus_tokens
from memworker.corpus.behaviours import BEHAVIOURS
from memworker.corpus.build import load_rows, split_counts, wire_row, write_manifest
from memworker.corpus.coding import CODING
from memworker.corpus.domains import GENERAL
from memworker.hashing import sha256_file, write_jsonl
from memworker.inference import codec
from memworker.ontology import PREDICATES
from memworker.spans import candidate_spans
from memworker.textnorm import is_user, norm

NATURAL_VERSION = "1.0.0"
SPLIT = "test"
#: the issue-11 bound on a prompt (system + user, ChatML, SmolLM2 tokenizer)
MAX_PROMPT_TOKENS = 1536
DOMAINS = tuple(d.key for d in GENERAL) + (CODING.key,)
CONFIDENCE = {"low": 0.35, "medium": 0.65, "high": 0.9}
STATUSES = ("superseded", "retracted", "rejected", "negated", "undecided", "injected", "secret",
            "failed", "hypothetical", "past", "reported", "stored")
FORBIDDEN_REASONS = ("secret", "injected", "rejected_suggestion", "negated", "undecided",
                     "failed_command")
#: what each hand-written set is for (EVAL_SPEC "Sets and what each is for"), by its folder name
USES = {
    "natural": "test only: never trained on, never tuned to; scored by the evaluator as its own set",
    "natural-dev": "design set: designs and thresholds are chosen on it (with val); never trained "
                   "on",
    "natural-train": "training set (issue 47): hand-written conversations to train on, split by "
                     "conversation into train and val (VAL_SHARE); never evaluated as a test",
}
#: the sets trained on, split by conversation (sha256 of its id) into train and a small val part
TRAINING_SETS = frozenset({"natural-train"})
VAL_SHARE = 0.1


def training_split(conversation_id: str) -> str:
    """`val` for about VAL_SHARE of a training set's conversations (by sha256 of the id, so the
    split never depends on which other files exist), else `train`."""
    digest = int(hashlib.sha256(conversation_id.encode("utf-8")).hexdigest()[:8], 16)
    return "val" if digest / 0xFFFFFFFF < VAL_SHARE else "train"


_LOCAL = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}(:\d{2})?$")


class NaturalSetError(ValueError):
    """A hand-written conversation file is malformed or one of its rows fails the audit."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps timestamps as strings (YAML would turn them into datetimes)."""


_Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.copy().items()
}


# ------------------------------------------------------------------------------- reading


def _fail(where: str, msg: str) -> NaturalSetError:
    return NaturalSetError(f"{where}: {msg}")


def _keys(doc: Any, where: str, required: set[str], optional: set[str]) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise _fail(where, f"expected a mapping, got {type(doc).__name__}")
    missing = required - set(doc)
    unknown = set(doc) - required - optional
    if missing or unknown:
        raise _fail(where, f"missing keys {sorted(missing)}, unknown keys {sorted(unknown)}")
    return doc


def _str(value: Any, where: str, nullable: bool = False) -> str | None:
    if value is None and nullable:
        return None
    if not isinstance(value, str) or not value:
        raise _fail(where, f"expected a non-empty string, got {value!r} (quote it in YAML)")
    return value


def _stamp(value: Any, tz: str, where: str) -> str:
    text = _str(value, where)
    if _LOCAL.match(text):
        day, clock = text.split(" ")
        return f"{day}T{clock if clock.count(':') == 2 else clock + ':00'}{tz}"
    return text


def load_conversation(path: str | Path) -> dict[str, Any]:
    """One conversation file, checked for shape (not yet for labels)."""
    path = Path(path)
    where = str(path)
    try:
        doc = yaml.load(path.read_text("utf-8"), Loader=_Loader)  # noqa: S506 - safe subclass
    except yaml.YAMLError as exc:
        raise _fail(where, f"not valid YAML: {exc}") from None
    doc = _keys(doc, where, {"id", "domain", "tz", "events"},
                {"register", "notes", "extract", "consolidate", "reflect"})
    if doc["id"] != path.stem:
        raise _fail(where, f"id {doc['id']!r} differs from the file name {path.stem!r}")
    if doc["domain"] not in DOMAINS:
        raise _fail(where, f"unknown domain {doc['domain']!r}; expected one of {DOMAINS}")
    if not re.fullmatch(r"Z|[+-]\d{2}:\d{2}", str(doc["tz"])):
        raise _fail(where, f"tz {doc['tz']!r} must look like +01:00 (quote it)")
    events = []
    for n, e in enumerate(doc["events"]):
        w = f"{where} events[{n}]"
        e = _keys(e, w, {"i", "role", "at", "text"}, {"trusted"})
        if e["i"] != n:
            raise _fail(w, f"index {e['i']} should be {n} (events are numbered from 0, in order)")
        if e["role"] not in ("user", "assistant", "tool"):
            raise _fail(w, f"unknown role {e['role']!r}")
        trusted = e.get("trusted", e["role"] != "tool")
        if not isinstance(trusted, bool):
            raise _fail(w, "trusted must be true or false")
        events.append({"index": n, "role": e["role"], "timestamp": _stamp(e["at"], doc["tz"], w),
                       "text": _str(e["text"], w), "trusted": trusted})
    stamps = [e["timestamp"] for e in events]
    if stamps != sorted(stamps) and len({s[-6:] for s in stamps}) == 1:
        raise _fail(where, "events are not in time order")
    return {**doc, "events": events, "path": where}


# ---------------------------------------------------------------------------------- rows


def _behaviours(names: Any, where: str) -> list[str]:
    names = names or []
    unknown = [b for b in names if b not in BEHAVIOURS]
    if unknown:
        raise _fail(where, f"unknown behaviours {unknown}; known: {BEHAVIOURS}")
    present = set(names)
    return [b for b in BEHAVIOURS if b in present]


def _claim(c: dict[str, Any], window: set[int], where: str) -> tuple[dict, dict]:
    c = _keys(c, where, {"quotes", "subject", "predicate", "value", "statement", "kind"},
              {"type", "time", "date", "precision", "supersedes", "confidence", "behaviour",
               "believer", "exception", "alt", "oov"})
    quotes = c["quotes"]
    if not quotes or not all(isinstance(q, list) and len(q) == 2 for q in quotes):
        raise _fail(where, "quotes must be a list of [event index, exact quote] pairs")
    for idx, _ in quotes:
        if idx not in window:
            raise _fail(where, f"quotes event {idx}, outside the window")
    supersedes = list(c.get("supersedes") or [])
    if c.get("confidence", "high") not in CONFIDENCE:
        raise _fail(where, f"confidence must be one of {list(CONFIDENCE)}")
    time = _str(c.get("time"), where + " time", nullable=True)
    if (time is None) != (c.get("date") is None) or (time is None) != (c.get("precision") is None):
        raise _fail(where, "time, date and precision are given together or not at all")
    claim = {
        "source_indices": [int(i) for i, _ in quotes],
        "quotes": [_str(q, where + " quote") for _, q in quotes],
        "subject": {"name": _str(c["subject"], where), "type": c.get("type", "person")},
        "predicate": _str(c["predicate"], where),
        "value": _str(c["value"], where + " value", nullable=True),
        "statement": _str(c["statement"], where),
        "kind": c["kind"],
        "time_expression": time,
        "date": None if c.get("date") is None else str(c["date"]),
        "date_precision": c.get("precision"),
        "is_correction": bool(supersedes),
        "supersedes": supersedes,
        "confidence": CONFIDENCE[c.get("confidence", "high")],
    }
    truth = {"status": "current", "required": True, "behaviour": c.get("behaviour", ""),
             **{k: claim[k] for k in ("predicate", "value", "statement", "kind",
                                      "time_expression", "date", "date_precision",
                                      "is_correction", "supersedes", "source_indices", "quotes",
                                      "confidence")},
             "subject": claim["subject"]["name"], "subject_type": claim["subject"]["type"]}
    for key in ("believer", "exception"):
        if c.get(key):
            truth[key] = _str(c[key], where + " " + key)
    alternatives = _alternatives(c.get("alt"), where + " alt")
    if alternatives:
        truth["alternatives"] = alternatives
    oov = c.get("oov", False)
    if not isinstance(oov, bool):
        raise _fail(where, "oov must be true or false")
    if oov and claim["predicate"] in PREDICATES:
        raise _fail(where, f"predicate {claim['predicate']!r} is in the ontology: drop `oov: true`")
    truth["in_vocabulary"] = not oov  # convention_problems() flags a predicate left unmarked
    return claim, truth


#: what a gold claim may list as acceptable alternatives (eval/README "The ruler")
ALT_KEYS = ("predicates", "values", "subjects")


def _alternatives(alt: Any, where: str) -> dict[str, list[str]]:
    """A gold claim's `alt`: other predicates, values and subject names a grader accepts."""
    if alt is None:
        return {}
    alt = _keys(alt, where, set(), set(ALT_KEYS))
    out = {}
    for key in ALT_KEYS:
        items = alt.get(key) or []
        if not isinstance(items, list):
            raise _fail(where, f"{key} must be a list of strings")
        if items:
            out[key] = [_str(x, f"{where} {key}") for x in items]
    for p in out.get("predicates", []):
        if p not in PREDICATES:
            raise _fail(where, f"alternative predicate {p!r} is not in the ontology")
    return out


def _other(o: dict[str, Any], where: str) -> dict[str, Any]:
    o = _keys(o, where, {"status", "subject", "predicate", "value"}, {"fact_id", "note"})
    if o["status"] not in STATUSES:
        raise _fail(where, f"unknown status {o['status']!r}; expected one of {STATUSES}")
    out = {"status": o["status"], "required": False, "subject": _str(o["subject"], where),
           "predicate": _str(o["predicate"], where),
           "value": _str(o["value"], where, nullable=True)}
    if o.get("fact_id"):
        out["fact_id"] = o["fact_id"]
    return out


def _forbidden(items: Any, where: str) -> list[dict[str, str]]:
    out = []
    for n, f in enumerate(items or []):
        f = _keys(f, f"{where} forbidden[{n}]", {"reason", "text"}, set())
        if f["reason"] not in FORBIDDEN_REASONS:
            raise _fail(where, f"forbidden reason {f['reason']!r} not in {FORBIDDEN_REASONS}")
        out.append({"reason": f["reason"], "text": _str(f["text"], where)})
    return out


def _base(conv: dict[str, Any], task: str, n: int) -> dict[str, Any]:
    return {"id": f"{conv['id']}-{task}-{n}", "task": task, "split": conv.get("split", SPLIT),
            "domain": conv["domain"], "family": f"natural-{conv['id']}", "episode": conv["id"]}


def _extract_row(conv: dict[str, Any], spec: dict[str, Any], n: int) -> dict[str, Any]:
    where = f"{conv['path']} extract[{n}]"
    spec = _keys(spec, where, {"window", "claims"},
                 {"facts", "behaviours", "other", "forbidden", "notes"})
    lo, hi = spec["window"]
    events = [e for e in conv["events"] if lo <= e["index"] <= hi]
    if not events or events[0]["index"] != lo or events[-1]["index"] != hi:
        raise _fail(where, f"window {spec['window']} is not a range of event indices")
    window = {e["index"] for e in events}
    facts = []
    about: dict[str, list[Any]] = {}  # fact id -> [subject, predicate, value], when written
    for m, f in enumerate(spec.get("facts") or []):
        f = _keys(f, f"{where} facts[{m}]", {"id", "statement"}, {"since", "about"})
        since = f.get("since")
        facts.append({"id": f["id"], "statement": _str(f["statement"], where),
                      "valid_from": None if since is None else str(since)})
        about[f["id"]] = list(f.get("about") or [None, None, None])
    claims, truths = [], []
    for m, c in enumerate(spec["claims"] or []):
        claim, truth = _claim(c, window, f"{where} claims[{m}]")
        if truth["in_vocabulary"]:  # an out-of-vocabulary fact is graded, not in the gold answer
            claims.append(claim)
        truths.append(truth)
    truths += [_other(o, f"{where} other[{m}]") for m, o in enumerate(spec.get("other") or [])]
    stored_ids = {t.get("fact_id") for t in truths}
    for f in facts:  # facts the store holds and nothing in the window changes
        if f["id"] not in stored_ids:
            subject, predicate, value = about[f["id"]]
            truths.append({"status": "stored", "required": False, "fact_id": f["id"],
                           "subject": subject, "predicate": predicate, "value": value,
                           "statement": f["statement"]})
    episode_id = f"{conv['id']}-w{n}"
    return {**_base(conv, "extract", n),
            "behaviours": _behaviours(spec.get("behaviours"), where),
            "input": {"episode_id": episode_id, "events": events, "existing_facts": facts},
            "gold": {"claims": claims},
            "truth": {"facts": truths, "forbidden": _forbidden(spec.get("forbidden"), where),
                      "empty": not truths or not any(t["required"] for t in truths)}}


def _consolidate_row(conv: dict[str, Any], spec: dict[str, Any], n: int) -> dict[str, Any]:
    where = f"{conv['path']} consolidate[{n}]"
    spec = _keys(spec, where, {"facts", "observations"}, {"behaviours", "notes"})
    facts = [{"id": f["id"], "statement": _str(f["statement"], where)}
             for f in (_keys(f, where, {"id", "statement"}, set()) for f in spec["facts"])]
    obs, truth = [], []
    for m, o in enumerate(spec["observations"] or []):
        o = _keys(o, f"{where} observations[{m}]", {"statement", "supports", "subject"}, set())
        obs.append({"statement": _str(o["statement"], where), "supports": list(o["supports"])})
        truth.append({"supports": list(o["supports"]), "subject": _str(o["subject"], where),
                      "statement": o["statement"]})
    behaviours = list(spec.get("behaviours") or []) + (["consolidation"] if obs else [])
    return {**_base(conv, "consolidate", n), "behaviours": _behaviours(behaviours, where),
            "input": {"facts": facts}, "gold": {"observations": obs},
            "truth": {"observations": truth}}


def _reflect_row(conv: dict[str, Any], spec: dict[str, Any], n: int) -> dict[str, Any]:
    where = f"{conv['path']} reflect[{n}]"
    spec = _keys(spec, where, {"question", "asked_at", "evidence", "answer", "citations",
                               "insufficient"},
                 {"behaviours", "stale", "injected", "forbidden", "subject", "predicate",
                  "value", "missing", "notes"})
    evidence = []
    for m, e in enumerate(spec["evidence"]):
        e = _keys(e, f"{where} evidence[{m}]", {"id", "at", "text"}, set())
        evidence.append({"id": e["id"], "timestamp": _stamp(e["at"], conv["tz"], where),
                         "text": _str(e["text"], where)})
    insufficient = spec["insufficient"]
    if not isinstance(insufficient, bool):
        raise _fail(where, "insufficient must be true or false")
    citations = list(spec["citations"] or [])
    behaviours = list(spec.get("behaviours") or [])
    if insufficient and "insufficient_evidence" not in behaviours:
        behaviours.append("insufficient_evidence")
    if spec.get("injected") and "injection" not in behaviours:
        behaviours.append("injection")
    truth = {"answerable": not insufficient, "expected_answer": _str(spec["answer"], where),
             "gold_citations": citations, "stale": list(spec.get("stale") or []),
             "injected_evidence": list(spec.get("injected") or []),
             "forbidden": _forbidden(spec.get("forbidden"), where)}
    for key in ("subject", "predicate", "value", "missing"):
        if spec.get(key) is not None:
            truth[key] = _str(spec[key], where)
    return {**_base(conv, "reflect", n), "behaviours": _behaviours(behaviours, where),
            "input": {"question": _str(spec["question"], where),
                      "asked_at": _stamp(spec["asked_at"], conv["tz"], where),
                      "evidence": evidence},
            "gold": {"answer": spec["answer"], "citations": citations,
                     "insufficient_evidence": insufficient},
            "truth": truth}


def conversation_rows(conv: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of one loaded conversation, in file order: extract, consolidate, reflect."""
    rows = [_extract_row(conv, s, n) for n, s in enumerate(conv.get("extract") or [])]
    rows += [_consolidate_row(conv, s, n) for n, s in enumerate(conv.get("consolidate") or [])]
    rows += [_reflect_row(conv, s, n) for n, s in enumerate(conv.get("reflect") or [])]
    return rows


def check_row(row: dict[str, Any], path: str) -> None:
    """Raise NaturalSetError naming the file and row unless the row is contract-valid and passes
    the corpus audit with zero violations (hand labels are never repaired)."""
    problems = [f"{v.code}: {v.detail}" for v in A.audit_row(row, read_back=False)]
    if row["task"] == "extract":
        events = {e["index"]: e for e in row["input"]["events"]}
        for c in row["gold"]["claims"]:
            for i, q in zip(c["source_indices"], c["quotes"], strict=True):
                spans = candidate_spans(events[i]["text"])
                if q in events[i]["text"] and q not in spans:
                    problems.append(f"quote {q[:50]!r} of event {i} is not among its "
                                    f"{len(spans)} candidate spans")
    if not problems:
        problems = _codec_problems(row, read_back=False)
    if problems:
        raise NaturalSetError(f"{path}: row {row['id']} fails the audit:\n  "
                              + "\n  ".join(dict.fromkeys(problems)))


def _codec_problems(row: dict[str, Any], *, read_back: bool = True) -> list[str]:
    """Why the codec would not reproduce the gold from its own wire answer (empty: it does).
    The request's dynamic schema caps claims, quotes and string lengths by the window's size, so
    a long window can hold fewer claims than a short one. `read_back=False`: a consolidate or
    reflect gold is sent in canonical form instead (its ids kept, not read from its text)."""
    task = row["task"]
    canonical = task != "extract" and not read_back
    answer = (json.dumps(row["gold"], ensure_ascii=False) if canonical
              else wire.dump_answer(task, wire.to_wire(task, row["gold"])))
    try:
        result = codec.decode(task, row["input"], answer)
    except codec.CodecError as exc:
        return [f"codec_rejects_gold: {'; '.join(e[:300] for e in exc.errors)}"]
    # all but what the codec derives (statement, confidence: wire v3)
    if wire.comparable_answer(task, result.output) != wire.comparable_answer(task, row["gold"]):
        return ["codec_changes_gold: the decoded answer differs from the gold"]
    return [f"codec_diagnostic: {d}" for d in result.diagnostics
            if not (canonical and d.startswith(codec.CANONICAL_FORM))]


_RELATION_SUBJECT = re.compile(r"^(?P<name>.+?) \((?P<owner>the user|[^()]+?)'s (?P<rel>[^)]+)\)$")
_UNNAMED = re.compile(r"^the user's (?P<rel>.+)$", re.I)


def convention_problems(row: dict[str, Any]) -> list[str]:
    """Where an extract row's gold breaks the product's conventions (eval/README "The ruler"):
    a predicate outside the ontology not marked out of vocabulary, a relationship not written
    as the corpus writes it (subject "Name (the user's R)", predicate `relationship`, value R,
    kind relationship), a `<relation>_of` predicate, or a subject whose name occurs neither in
    the window's events nor in its existing facts."""
    if row["task"] != "extract":
        return []
    text = " ".join(e["text"] for e in row["input"]["events"]) + " " + " ".join(
        f["statement"] for f in row["input"]["existing_facts"])
    said = set(norm(text).split())
    out = []
    for t in row["truth"]["facts"]:
        if t.get("status") != "current" or not t.get("required"):
            continue
        where = f"{row['id']} {t['subject']} {t['predicate']}={t['value']!r}"
        pred, subject = t["predicate"], t["subject"]
        if t.get("in_vocabulary", True) and pred not in PREDICATES:
            out.append(f"{where}: predicate not in the ontology and not marked `oov: true`")
        if (pred not in PREDICATES and re.fullmatch(r"[a-z_]+_of", pred)
                and is_user(t["value"] or "")):
            out.append(f"{where}: a `<relation>_of` predicate; write (Name (the user's R), "
                       "relationship, R)")
        named, unnamed = _RELATION_SUBJECT.match(subject), _UNNAMED.match(subject)
        if pred == "relationship" and t["kind"] != "retraction":
            rel = (named.group("rel") if named else unnamed.group("rel") if unnamed else None)
            owner = named.group("owner") if named else "the user"
            wanted = {rel} if owner == "the user" else {rel, f"{owner}'s {rel}"}
            if t["kind"] != "relationship" or rel is None or t["value"] not in wanted:
                out.append(f"{where}: a relationship is (Name (the user's R), relationship, R), "
                           "kind relationship")
        names = [subject, *(t.get("alternatives") or {}).get("subjects", [])]
        if not any(_named_in(n, said) for n in names):
            out.append(f"{where}: subject {subject!r} (or an alternative) occurs neither in the "
                       "window nor in its facts")
    return out


def _named_in(subject: str, said: set[str]) -> bool:
    """The user, an unnamed relative of theirs ("the user's mother"), or a name whose words all
    occur in `said` (the normalised words of the window and its facts)."""
    named = _RELATION_SUBJECT.match(subject)
    bare = named.group("name") if named else subject
    if is_user(bare) or _UNNAMED.match(bare):
        return True
    words = [w for w in norm(bare).split() if len(w) > 2 and w not in ("the", "user")]
    return all(w in said for w in words)


def load_natural(source: str | Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """(rows, {file name: sha256}) of every conversation in `source`, each row audited."""
    source = Path(source)
    paths = sorted(source.glob("*.yaml"))
    if not paths:
        raise NaturalSetError(f"{source}: no conversation files (*.yaml)")
    rows: list[dict[str, Any]] = []
    hashes: dict[str, str] = {}
    loaded = []
    training = source.name in TRAINING_SETS
    for path in paths:
        conv = load_conversation(path)
        if training:
            conv["split"] = training_split(conv["id"])
        loaded.append((path, conversation_rows(conv)))
        hashes[path.name] = sha256_file(path)
    for path, conv_rows in loaded:
        for row in conv_rows:
            # the vocabulary a store sends: none given, so the default and the existing facts'
            # predicates (memworker.ontology.vocabulary); a gold claim outside it is out of
            # vocabulary by its label (`oov: true`), graded but not in the gold answer
            contracts.validate_input(row["task"], row["input"])
            check_row(row, str(path))
            rows.append(row)
    ids = Counter(r["id"] for r in rows)
    dupes = sorted(i for i, k in ids.items() if k > 1)
    if dupes:
        raise NaturalSetError(f"{source}: duplicate row ids {dupes}")
    return rows, hashes


# -------------------------------------------------------------------------------- freeze


def _per_task_behaviours(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out = {}
    for task in contracts.TASKS:
        c = Counter(b for r in rows if r["task"] == task for b in r["behaviours"])
        out[task] = {b: c[b] for b in BEHAVIOURS if c[b]}
    return out


def _kinds(rows: list[dict[str, Any]]) -> dict[str, int]:
    c = Counter(cl["kind"] for r in rows if r["task"] == "extract" for cl in r["gold"]["claims"])
    return dict(sorted(c.items()))


def build_natural(source: str | Path, out: str | Path, count_tokens: bool = True
                  ) -> dict[str, Any]:
    """Audit every hand-written conversation in `source` and freeze the rows into `out`."""
    rows, hashes = load_natural(source)
    tokens = None
    if count_tokens:
        counts = corpus_tokens.count([wire_row(r)["messages"] for r in rows])
        over = [(r["id"], p) for r, (p, _) in zip(rows, counts, strict=True)
                if p > MAX_PROMPT_TOKENS]
        if over:
            raise NaturalSetError(f"prompts over {MAX_PROMPT_TOKENS} tokens: {over}; "
                                  "shorten their window")
        tokens = {"tokenizer": corpus_tokens.tokenizer_identity(),
                  "max_prompt_allowed": MAX_PROMPT_TOKENS,
                  "counted": "prompt = system + user in ChatML with the assistant header; "
                             "total = system + user + gold answer",
                  "rows_over_1024_total": sum(1 for _, t in counts if t > 1024)}
        for task in contracts.TASKS:
            c = [n for r, n in zip(rows, counts, strict=True) if r["task"] == task]
            tokens[task] = ({"rows": len(c),
                             "mean_prompt": round(sum(p for p, _ in c) / len(c), 1),
                             "max_prompt": max(p for p, _ in c),
                             "mean_total": round(sum(t for _, t in c) / len(c), 1),
                             "max_total": max(t for _, t in c)} if c else None)
    out = Path(out)
    (out / "canonical").mkdir(parents=True, exist_ok=True)
    (out / "wire").mkdir(exist_ok=True)
    splits = sorted({r["split"] for r in rows}, key=("train", "val", SPLIT).index)
    files = {}
    for split in splits:
        part = [r for r in rows if r["split"] == split]
        files[f"canonical/{split}.jsonl"] = write_jsonl(out / "canonical" / f"{split}.jsonl", part)
        files[f"wire/{split}.jsonl"] = write_jsonl(out / "wire" / f"{split}.jsonl",
                                                   (wire_row(r) for r in part))
    extract = [r for r in rows if r["task"] == "extract"]
    manifest: dict[str, Any] = {
        "generator": "memworker.corpus.natural",
        "generator_version": NATURAL_VERSION,
        "hand_written": True,
        "use": USES.get(Path(source).name, USES["natural"]),
        "splits": splits,
        "source": Path(source).as_posix(),
        "rebuild_args": f"--natural {Path(source).as_posix()}"
        + ("" if count_tokens else " --no-tokens"),
        "conversations": len(hashes),
        "source_files": dict(sorted(hashes.items())),
        "counts": {split: split_counts([r for r in rows if r["split"] == split])
                   for split in splits},
        "totals": split_counts(rows),
        "behaviours_per_task": _per_task_behaviours(rows),
        "claim_kinds": _kinds(rows),
        "claims": sum(len(r["gold"]["claims"]) for r in extract),
        "events_per_extract_window": {
            "mean": round(sum(len(r["input"]["events"]) for r in extract) / len(extract), 2)
            if extract else 0.0,
            "max": max((len(r["input"]["events"]) for r in extract), default=0)},
        "audit": {"rows_audited": len(rows), "rows_with_violations": 0, "repaired_from_truth": 0},
        "files": dict(sorted(files.items())),
        "tokens": tokens,
    }
    return write_manifest(out, manifest)


def audit_natural(path: str | Path) -> dict[str, Any]:
    """Verify a frozen natural set against its manifest and re-audit every row."""
    manifest = json.loads((Path(path) / "manifest.json").read_text("utf-8"))
    rows = [r for split in manifest.get("splits", [SPLIT])
            for r in load_rows(path, split, form="canonical")]
    problems = A.audit_rows(rows, read_back=False)  # hand labels: see the module docstring
    codes = Counter(v.code for vs in problems.values() for v in vs)
    examples: dict[str, str] = {}
    for rid, vs in problems.items():
        for v in vs:
            examples.setdefault(v.code, f"{rid}: {v.detail}")
    return {"rows": len(rows), "rows_with_violations": len(problems),
            "violations": {c: codes[c] for c in A.CODES if codes[c]}, "examples": examples}
