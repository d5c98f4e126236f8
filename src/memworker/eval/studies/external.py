"""External diagnostic on a LoCoMo-format file a user supplies (EVAL_SPEC § External diagnostic).

Evaluation only: nothing here trains on the file, and the numbers are a diagnostic of the
worker on real conversations nobody here wrote, **not LoCoMo QA accuracy** (no retrieval over
the whole conversation, a different answer checker, windows instead of whole sessions).

Input layout (a JSON list of samples; an object with a `samples` or `data` list and an optional
`license` is accepted too):

- `conversation`: `speaker_a`, `speaker_b`, `session_N` (a list of turns `{speaker, dia_id,
  text}`) and `session_N_date_time` (e.g. "1:56 pm on 8 May, 2023", or an ISO date-time).
- observations: `observation.session_N_observation` (the published locomo10.json layout),
  `observations.session_N_observation` (its README's name), or `session_N_observation` on the
  sample or inside `conversation`; each `{speaker: [[fact, dia_id or [dia_id, ...]], ...]}`.
- `qa`: `{question, answer, evidence: [dia_id, ...], category}`; a row with `adversarial_answer`
  and no `answer` (category 5) is an abstention row.

Extraction windows: `window` consecutive turns of one session (sessions are tiled without
overlap; `windows` of the tiles are chosen with `random.Random(seed)`). Every event carries the
session's timestamp (no time zone is given; UTC is assumed). The window's *focal* speaker (the one
with more turns; on a tie the one who wrote more) is the `user`, the other speaker the
`assistant`, so the worker's rule "store what the user states" applies; only the focal speaker's
observations are scored.

Scores per extraction window (ratios of sums; a failed row counts as one unsupported claim and
covers nothing):

- `extract_support` (claims): a claim's cited turns include a turn that an observation of the
  focal speaker cites.
- `extract_turn_coverage` (observed turns): turns cited by an observation that some claim cites.
- `extract_content_coverage` (observations): observations whose content a claim matches
  (`memworker.textnorm`: the claim value's content words, stemmed, all occur in the observation;
  a claim without a value uses its statement's content words, at least half of them and two).
- `extract_empty` (windows with no observation of the focal speaker): answered with no claims.

Reflection on QA rows: the question with its evidence turns as evidence items (text
"Speaker: turn", the turn's session time; `distractors` other turns of the conversation may be
added), asked at the conversation's last session time. `reflect_answer` uses the evaluator's
answer checker (`grade.answer_match`, key words of the expected answer); `reflect_citations`: a
non-empty subset of the evidence turns; `reflect_abstention`: the insufficient-evidence flag is
right (abstention rows: flag true, no citations); `reflect_correct`: all of them. These are the
evaluator's reflect rules (`grade.reflect_metrics`), and the summary is the evaluator's
(`summary.grade_arms`, `summary.summarise`).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from memworker.eval import runner, stats
from memworker.eval import summary as S
from memworker.eval.cli import _gguf_hashes
from memworker.eval.grade import reflect_metrics, with_schema
from memworker.eval.runner import EvalError, Sampler
from memworker.eval.summary import definition_lines, metric_tables, schema_lines
from memworker.hashing import sha256_file, write_json
from memworker.prompts import template_hashes
from memworker.receipts import environment
from memworker.textnorm import norm, stem
from memworker.turns import FORMS

DISCLAIMER = ("A diagnostic, not LoCoMo QA accuracy: windows of a few turns scored against the "
              "file's generated session observations, and QA rows answered from their own "
              "evidence turns (no retrieval) with this repo's answer checker. The file is "
              "evaluation data only and is never trained on.")
TASKS = ("extract", "reflect")
PRIMARY = {"extract": "extract_support", "reflect": "reflect_correct"}
BINARY = ("schema_first_try", "schema_accepted", "extract_empty", "reflect_correct",
          "reflect_answer", "reflect_citations", "reflect_abstention")
METRIC_HELP = {
    "schema_first_try": "answer accepted by the codec on the first attempt (rows)",
    "schema_accepted": "answer accepted on the first attempt or after the one retry (rows)",
    "extract_support": "claims whose cited turns include a turn an observation of the focal "
                       "speaker cites (claims; a failed row counts as one unsupported claim)",
    "extract_turn_coverage": "turns cited by an observation of the focal speaker that some "
                             "claim cites (observed turns)",
    "extract_content_coverage": "observations of the focal speaker whose content a claim "
                                "matches (observations)",
    "extract_empty": "no claim in a window where the focal speaker has no observation (rows)",
    "reflect_correct": "answer, citations and the insufficient-evidence flag all right (rows)",
    "reflect_answer": "the answer holds the expected answer's key words (answerable rows)",
    "reflect_citations": "citations are a non-empty subset of the evidence turns "
                         "(answerable rows)",
    "reflect_abstention": "the insufficient-evidence flag is right; abstentions cite nothing "
                          "(rows)",
}
MAX_EVENTS = 40          # episode contract: events maxItems
MAX_EVENT_TEXT = 1000    # episode contract: event text maxLength
MAX_EVIDENCE = 20        # reflect_input contract: evidence maxItems
MAX_EVIDENCE_TEXT = 600  # reflect_input contract: evidence text maxLength
_MONTHS = {m: i + 1 for i, m in enumerate(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september",
     "october", "november", "december"))}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_LOCOMO_TIME = re.compile(
    r"^\s*(?:(?P<h>\d{1,2})(?::(?P<m>\d{2}))?\s*(?P<ampm>am|pm|a\.m\.|p\.m\.)\s+on\s+)?"
    r"(?P<day>\d{1,2})\s+(?P<month>[A-Za-z]+)\.?,?\s+(?P<year>\d{4})\s*$", re.I)
_SESSION = re.compile(r"^session_(\d+)$")
_SESSION_OBS = re.compile(r"^session_(\d+)_observation$")
_DIA = re.compile(r"^D(\d+):0*(\d+)$")
_STOP = {"the", "a", "an", "is", "are", "was", "were", "be", "been", "to", "of", "in", "on", "at",
         "and", "or", "does", "do", "did", "what", "which", "who", "where", "when", "how", "s",
         "it", "that", "this", "for", "with", "by", "their", "they", "has", "have", "had", "user",
         "her", "his", "she", "he", "i", "my", "me", "we", "our", "you", "your", "them", "about",
         "from", "as", "so", "very", "also", "some", "other", "into", "its", "not", "no", "here",
         "there", "now", "then", "too", "really", "just"}


class LocomoError(ValueError):
    """The file is not in the LoCoMo layout; the message says where and what is expected."""


@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str
    session: int
    timestamp: str


@dataclass
class Sample:
    sample_id: str
    speakers: tuple[str, str]
    sessions: dict[int, list[Turn]]
    timestamps: dict[int, str]
    #: session -> speaker -> [(fact, [dia_id, ...])]
    observations: dict[int, dict[str, list[tuple[str, list[str]]]]]
    qa: list[dict[str, Any]]

    @property
    def turns(self) -> dict[str, Turn]:
        return {t.dia_id: t for n in sorted(self.sessions) for t in self.sessions[n]}


@dataclass
class Locomo:
    path: str
    sha256: str
    license: str | None
    samples: list[Sample]
    notes: Counter = field(default_factory=Counter)

    def counts(self) -> dict[str, int]:
        return {"samples": len(self.samples),
                "sessions": sum(len(s.sessions) for s in self.samples),
                "turns": sum(len(t) for s in self.samples for t in s.sessions.values()),
                "observations": sum(len(f) for s in self.samples for o in s.observations.values()
                                    for f in o.values()),
                "qa": sum(len(s.qa) for s in self.samples)}


# --- loading ------------------------------------------------------------------------------------

def canon_dia(dia_id: str) -> str:
    """`D3:07` -> `D3:7` (some published evidence lists pad the turn number)."""
    m = _DIA.match(dia_id.strip())
    return f"D{m.group(1)}:{m.group(2)}" if m else dia_id.strip()


def split_dia_ids(value: Any) -> list[str]:
    """Dia ids of an observation's or a QA row's evidence: a string (possibly several, separated
    by commas, semicolons or spaces) or a list of such strings."""
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, str):
            out += [canon_dia(p) for p in re.split(r"[;,\s]+", item) if p.strip()]
    return out


def parse_session_time(text: Any, where: str) -> str:
    """`1:56 pm on 8 May, 2023` (or `8 May, 2023`, or an ISO date-time) -> `2023-05-08T13:56:00Z`.
    LoCoMo gives no time zone; UTC is assumed."""
    if not isinstance(text, str) or not text.strip():
        raise LocomoError(f"{where}: missing session time (expected text like '1:56 pm on 8 May, "
                          "2023')")
    m = _LOCOMO_TIME.match(text)
    if m:
        month = _MONTHS.get(m.group("month").lower())
        hour, minute = int(m.group("h") or 0), int(m.group("m") or 0)
        ampm = (m.group("ampm") or "").lower().replace(".", "")
        if ampm and not 1 <= hour <= 12:
            month = None
        hour = hour % 12 + (12 if ampm == "pm" else 0) if ampm else hour
        if month is not None:
            try:
                when = datetime(int(m.group("year")), month, int(m.group("day")), hour, minute,
                                tzinfo=timezone.utc)
            except ValueError:
                when = None
            if when is not None:
                return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise LocomoError(f"{where}: cannot read the session time {text!r} (expected text like "
                          "'1:56 pm on 8 May, 2023' or an ISO date-time)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def _declared_license(doc: Any) -> str | None:
    if isinstance(doc, dict):
        for key in ("license", "licence", "License"):
            if isinstance(doc.get(key), str) and doc[key].strip():
                return doc[key].strip()
    return None


def load_locomo(path: str | Path) -> Locomo:
    """Read and check a LoCoMo-format file; raise LocomoError with a one-line reason."""
    p = Path(path)
    if not p.is_file():
        raise LocomoError(f"LoCoMo file not found: {p} (pass the path of a LoCoMo-format JSON "
                          "file, e.g. locomo10.json)")
    try:
        doc = json.loads(p.read_text("utf-8"))
    except UnicodeDecodeError:
        raise LocomoError(f"{p}: not UTF-8 text (expected a LoCoMo-format JSON file)") from None
    except json.JSONDecodeError as exc:
        raise LocomoError(f"{p}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
                          ) from None
    license_ = _declared_license(doc)
    if isinstance(doc, dict):
        items = doc.get("samples", doc.get("data"))
        if not isinstance(items, list):
            raise LocomoError(f"{p}: expected a JSON list of samples (or an object with a "
                              "'samples' list), got an object without one")
    elif isinstance(doc, list):
        items = doc
    else:
        raise LocomoError(f"{p}: expected a JSON list of samples, got {type(doc).__name__}")
    if not items:
        raise LocomoError(f"{p}: the file holds no samples")
    notes: Counter = Counter()
    samples = [_sample(item, k, notes) for k, item in enumerate(items)]
    ids = [s.sample_id for s in samples]
    if len(set(ids)) != len(ids):
        twice = sorted(i for i in set(ids) if ids.count(i) > 1)
        raise LocomoError(f"{p}: sample_id values repeat ({', '.join(twice[:3])})")
    sample_licenses = {lic for item in items if (lic := _declared_license(item))}
    if license_ is None and sample_licenses:
        license_ = "; ".join(sorted(sample_licenses))
    return Locomo(str(p), sha256_file(p), license_, samples, notes)


def _sample(item: Any, k: int, notes: Counter) -> Sample:
    where = f"sample {k}"
    if not isinstance(item, dict):
        raise LocomoError(f"{where}: expected an object with 'conversation' and 'qa', got "
                          f"{type(item).__name__}")
    sample_id = str(item.get("sample_id", f"sample-{k}"))
    where = f"sample {k} ({sample_id})"
    conv = item.get("conversation")
    if not isinstance(conv, dict):
        raise LocomoError(f"{where}: missing 'conversation' object (with speaker_a, speaker_b, "
                          "session_N and session_N_date_time)")
    speakers = (conv.get("speaker_a"), conv.get("speaker_b"))
    if not all(isinstance(s, str) and s.strip() for s in speakers) or speakers[0] == speakers[1]:
        raise LocomoError(f"{where}: conversation.speaker_a and speaker_b must be two different "
                          "names")
    sessions: dict[int, list[Turn]] = {}
    timestamps: dict[int, str] = {}
    seen: set[str] = set()
    for key in sorted(conv, key=lambda x: (len(x), x)):
        m = _SESSION.match(key)
        if not m:
            continue
        n = int(m.group(1))
        turns = conv[key]
        if not isinstance(turns, list):
            raise LocomoError(f"{where}: conversation.{key} must be a list of turns")
        if not turns:
            continue
        stamp = parse_session_time(conv.get(f"{key}_date_time"), f"{where}: conversation."
                                   f"{key}_date_time")
        timestamps[n] = stamp
        out = []
        for j, t in enumerate(turns):
            tw = f"{where}: conversation.{key}[{j}]"
            if not isinstance(t, dict):
                raise LocomoError(f"{tw}: expected a turn object {{speaker, dia_id, text}}")
            for name in ("speaker", "dia_id", "text"):
                if not isinstance(t.get(name), str):
                    raise LocomoError(f"{tw}: missing string field '{name}' (a turn is "
                                      "{speaker, dia_id, text})")
            if t["speaker"] not in speakers:
                raise LocomoError(f"{tw}: speaker {t['speaker']!r} is neither speaker_a "
                                  f"{speakers[0]!r} nor speaker_b {speakers[1]!r}")
            dia = canon_dia(t["dia_id"])
            if dia in seen:
                raise LocomoError(f"{tw}: dia_id {t['dia_id']!r} repeats")
            seen.add(dia)
            out.append(Turn(dia, t["speaker"], t["text"], n, stamp))
        sessions[n] = out
    if not sessions:
        raise LocomoError(f"{where}: conversation has no session_N turn lists")
    observations = _observations(item, conv, where, speakers, notes)
    qa = item.get("qa", [])
    if not isinstance(qa, list):
        raise LocomoError(f"{where}: 'qa' must be a list of question objects")
    for j, q in enumerate(qa):
        if not isinstance(q, dict) or not isinstance(q.get("question"), str):
            raise LocomoError(f"{where}: qa[{j}] must be an object with a 'question' string")
        if "evidence" in q and not isinstance(q["evidence"], list | str):
            raise LocomoError(f"{where}: qa[{j}].evidence must be a list of dia ids")
    return Sample(sample_id, speakers, sessions, timestamps, observations, qa)


def _observations(item: dict[str, Any], conv: dict[str, Any], where: str,
                  speakers: tuple[str, str], notes: Counter
                  ) -> dict[int, dict[str, list[tuple[str, list[str]]]]]:
    found: dict[str, Any] = {}
    for container in (item.get("observation"), item.get("observations"), item, conv):
        if isinstance(container, dict):
            for key, value in container.items():
                if _SESSION_OBS.match(key) and key not in found:
                    found[key] = value
    out: dict[int, dict[str, list[tuple[str, list[str]]]]] = {}
    for key, value in found.items():
        n = int(_SESSION_OBS.match(key).group(1))
        if not isinstance(value, dict):
            raise LocomoError(f"{where}: {key} must be an object {{speaker: [[fact, dia_id], "
                              "...]}}")
        per: dict[str, list[tuple[str, list[str]]]] = {}
        for speaker, facts in value.items():
            if not isinstance(facts, list):
                raise LocomoError(f"{where}: {key}.{speaker} must be a list of [fact, dia_id]")
            if speaker not in speakers:
                notes["observations_of_unknown_speaker"] += len(facts)
                continue
            for j, f in enumerate(facts):
                if (not isinstance(f, list) or len(f) < 2 or not isinstance(f[0], str)):
                    raise LocomoError(f"{where}: {key}.{speaker}[{j}] must be [fact, dia_id]")
                ids = split_dia_ids(f[1])
                if not ids:
                    notes["observations_without_dia_id"] += 1
                    continue
                per.setdefault(speaker, []).append((f[0], ids))
        out[n] = per
    return out


# --- rows ---------------------------------------------------------------------------------------

def evidence_id(dia_id: str) -> str:
    """A dia id as an evidence id of the reflect contract (`D1:3` -> `D1_3`)."""
    text = re.sub(r"[^A-Za-z0-9_-]", "_", dia_id)
    if not text[:1].isalpha():
        text = "T" + text
    return text[:32]


def _focal(turns: list[Turn], speakers: tuple[str, str]) -> str:
    """The speaker with more turns in the window; on a tie the one who wrote more characters;
    then speaker_a."""
    turns_of = Counter(t.speaker for t in turns)
    chars_of = Counter({s: 0 for s in speakers})
    for t in turns:
        chars_of[t.speaker] += len(t.text)
    return max(speakers, key=lambda s: (turns_of[s], chars_of[s], s == speakers[0]))


def build_windows(data: Locomo, window: int, windows: int, seed: int) -> list[dict[str, Any]]:
    """Extraction rows: `windows` tiles of `window` consecutive turns of one session, chosen with
    `random.Random(seed)` from every tile of every session, in file order."""
    if not 1 <= window <= MAX_EVENTS:
        raise LocomoError(f"--window must be between 1 and {MAX_EVENTS} turns (the episode "
                          f"contract's event limit), got {window}")
    tiles = [(s, n, start) for s in data.samples for n in sorted(s.sessions)
             for start in range(0, len(s.sessions[n]), window)]
    chosen = sorted(random.Random(seed).sample(range(len(tiles)), min(max(windows, 0),
                                                                      len(tiles))))
    rows = []
    for k in chosen:
        sample, n, start = tiles[k]
        turns = sample.sessions[n][start:start + window]
        focal = _focal(turns, sample.speakers)
        dia = [t.dia_id for t in turns]
        events = []
        for i, t in enumerate(turns):
            text = t.text[:MAX_EVENT_TEXT]
            if len(t.text) > MAX_EVENT_TEXT:
                data.notes["event_text_truncated"] += 1
            events.append({"index": i, "role": "user" if t.speaker == focal else "assistant",
                           "timestamp": t.timestamp, "text": text, "trusted": True})
        facts = [(fact, ids) for fact, ids in sample.observations.get(n, {}).get(focal, [])
                 if set(ids) & set(dia)]
        row_id = f"{sample.sample_id}-s{n}-t{start}-w{len(turns)}-extract"
        rows.append({
            "id": row_id, "episode": sample.sample_id, "task": "extract",
            "input": {"episode_id": f"locomo-{row_id}"[:128], "events": events,
                      "existing_facts": []},
            "locomo": {"sample_id": sample.sample_id, "session": n, "first_turn": start,
                       "focal": focal, "dia_ids": dia,
                       "observations": [{"fact": f, "dia_ids": ids} for f, ids in facts]}})
    return rows


def build_questions(data: Locomo, questions: int | None, seed: int, distractors: int = 0
                    ) -> list[dict[str, Any]]:
    """Reflection rows: QA rows whose evidence turns are all in the file (others are counted in
    `data.notes`), `questions` of them chosen with `random.Random(seed)` (None: all)."""
    candidates = []
    for sample in data.samples:
        turns = sample.turns
        asked_at = sample.timestamps[max(sample.timestamps)]
        for j, q in enumerate(sample.qa):
            ids = split_dia_ids(q.get("evidence", []))
            answerable = "answer" in q and q.get("category") != 5
            if not answerable and "adversarial_answer" not in q and "answer" not in q:
                data.notes["qa_without_answer"] += 1
                continue
            if not ids:
                data.notes["qa_without_evidence"] += 1
                continue
            if any(i not in turns for i in ids):
                data.notes["qa_evidence_not_in_conversation"] += 1
                continue
            ids = list(dict.fromkeys(ids))
            if len(ids) + distractors > MAX_EVIDENCE:
                data.notes["qa_too_much_evidence"] += 1
                continue
            candidates.append((sample, j, q, ids, answerable, asked_at))
    if questions is not None:
        pick = sorted(random.Random(seed).sample(range(len(candidates)),
                                                 min(max(questions, 0), len(candidates))))
        candidates = [candidates[k] for k in pick]
    rows = []
    for sample, j, q, ids, answerable, asked_at in candidates:
        turns = sample.turns
        chosen = list(ids)
        if distractors:
            rng = random.Random(f"{seed}-{sample.sample_id}-{j}")
            others = [d for d in turns if d not in ids]
            chosen += rng.sample(others, min(distractors, len(others)))
        order = {d: k for k, d in enumerate(turns)}
        evidence = []
        for d in sorted(chosen, key=order.__getitem__):
            t = turns[d]
            text = f"{t.speaker}: {t.text}".strip()[:MAX_EVIDENCE_TEXT]
            evidence.append({"id": evidence_id(d), "timestamp": t.timestamp, "text": text})
        question = q["question"][:400]
        rows.append({
            "id": f"{sample.sample_id}-q{j}" + (f"-d{distractors}-s{seed}" if distractors else "")
                  + "-reflect", "episode": sample.sample_id,
            "task": "reflect",
            "input": {"question": question, "asked_at": asked_at, "evidence": evidence},
            "locomo": {"sample_id": sample.sample_id, "qa_index": j,
                       "category": q.get("category"), "answerable": answerable,
                       "answer": str(q.get("answer", "")) if answerable else None,
                       "gold_citations": [evidence_id(d) for d in ids]}})
    return rows


# --- grading ------------------------------------------------------------------------------------

def content_words(text: str | None) -> set[str]:
    return {stem(w) for w in norm(text).split() if w not in _STOP and len(w) > 1}


def claim_matches_observation(claim: dict[str, Any], fact: str) -> bool:
    """The claim value's content words all occur in the observation (stems); a claim without a
    value: at least half, and two, of its statement's content words (its subject's left out)."""
    have = content_words(fact)
    key = content_words(claim.get("value"))
    if key:
        return key <= have
    words = content_words(claim.get("statement")) - content_words(
        (claim.get("subject") or {}).get("name"))
    hits = len(words & have)
    return hits >= 2 and 2 * hits >= len(words)


def grade_window(row: dict[str, Any], status: str, output: dict[str, Any] | None
                 ) -> dict[str, Any]:
    info = row["locomo"]
    dia = info["dia_ids"]
    facts = info["observations"]
    window = set(dia)
    observed = {d for f in facts for d in f["dia_ids"] if d in window}
    claims = (output or {}).get("claims", [])
    cited_all: set[str] = set()
    supported = 0
    for c in claims:
        cited = {dia[i] for i in c["source_indices"] if 0 <= i < len(dia)}
        cited_all |= cited
        supported += bool(cited & observed)
    matched = sum(1 for f in facts if any(claim_matches_observation(c, f["fact"])
                                          for c in claims))
    metrics: dict[str, list[float]] = {
        "extract_support": [supported, len(claims)] if output is not None else [0, 1]}
    if observed:
        metrics["extract_turn_coverage"] = [len(observed & cited_all), len(observed)]
    if facts:
        metrics["extract_content_coverage"] = [matched, len(facts)]
    else:
        metrics["extract_empty"] = [int(output is not None and not claims), 1]
    return {"metrics": metrics,
            "counts": {"claims": len(claims), "supported": supported,
                       "observed_turns": len(observed), "observations": len(facts),
                       "observations_matched": matched}}


def grade_question(row: dict[str, Any], status: str, output: dict[str, Any] | None
                   ) -> dict[str, Any]:
    """A QA row graded by the evaluator's reflect rules (`grade.reflect_metrics`): the row's
    evidence turns are its gold citations, its answer the expected answer."""
    info = row["locomo"]
    answerable = info["answerable"]
    truth = {"answerable": answerable, "gold_citations": info["gold_citations"],
             **({"expected_answer": info["answer"], "value": info["answer"]} if answerable
                else {})}
    return {"metrics": reflect_metrics(truth, output, row["input"]["question"]),
            "counts": {"answerable": int(answerable), "category": info["category"]}}


def grade_sample(row: dict[str, Any], sample: dict[str, Any]) -> dict[str, Any]:
    """Verdicts of one external row (the `grader` given to `runner.run_arm`)."""
    status, output = sample["status"], sample["output"]
    verdict = (grade_window if row["task"] == "extract" else grade_question)(row, status, output)
    return with_schema(verdict, row["task"], status)


# --- summary ------------------------------------------------------------------------------------

def summarise(rows: list[dict[str, Any]], samples: list[dict[str, Any]], arms: list[str], *,
              config: dict[str, Any], resamples: int = stats.DEFAULT_RESAMPLES,
              seed: int = 0) -> dict[str, Any]:
    """The evaluator's own summary (`memworker.eval.summary.summarise`: intervals over
    conversations, paired comparisons, McNemar; z-scores of each task's `PRIMARY` here, as the
    evaluator's needs a structured truth) of the verdicts of this diagnostic's grader, plus
    reflection correctness per LoCoMo question category and the disclaimer."""
    graded = S.grade_arms(rows, samples, arms, grade_sample)
    summary = S.summarise(rows, samples, arms, config=config, resamples=resamples, seed=seed,
                          graded=graded, primary=PRIMARY)
    categories: dict[str, Any] = {a: {} for a in arms}
    for arm, verdicts in graded.items():
        for verdict in verdicts.values():
            if verdict["task"] != "reflect":
                continue
            entry = categories[arm].setdefault(str(verdict["counts"]["category"]),
                                               {"rows": 0, "correct": 0})
            entry["rows"] += 1
            entry["correct"] += verdict["metrics"]["reflect_correct"][0]
    return {**summary, "kind": "memworker-external-diagnostic", "disclaimer": DISCLAIMER,
            "license": config.get("file", {}).get("license"),
            "conversations": summary["episodes"],
            "reflect_by_category": {a: dict(sorted(c.items())) for a, c in categories.items()},
            "metric_help": METRIC_HELP,
            "statistics": {**summary["statistics"],
                           "interval": "95 % percentile bootstrap, conversations resampled"}}


def license_line(license_: str | None) -> str:
    if license_:
        return f"License declared by the file: {license_}."
    return ("The file declares no license; check the terms of the copy you use (the evaluation "
            "spec treats LoCoMo as non-commercial data).")


def report_markdown(summary: dict[str, Any]) -> str:
    cfg = summary["config"]
    arms = summary["arms"]
    f = cfg["file"]
    per_task = summary["rows_per_task"]
    left_out = ", ".join(f"{k} {v}" for k, v in sorted(f["notes"].items())) or "none"
    lines = [f"# External diagnostic on `{Path(f['path']).name}` (LoCoMo format)", "",
             f"**{summary['disclaimer']}**", "", license_line(summary["license"]), "",
             f"File sha256 `{f['sha256']}`; {f['counts']['samples']} conversations, "
             f"{f['counts']['turns']} turns, {f['counts']['observations']} observations, "
             f"{f['counts']['qa']} QA rows. Windows: {per_task.get('extract', 0)} of "
             f"up to {cfg['window']} turns ({cfg['windows']} asked, seed {cfg['seed']}); QA "
             f"rows: {per_task.get('reflect', 0)} (distractors {cfg['distractors']}). Rows left "
             f"out: {left_out}.",
             "", "Values: metric [95 % bootstrap interval over conversations] (n rows; num/den "
             "where the unit is not a row). Failed rows count as zero credit.", ""]
    lines += metric_tables(summary, TASKS)
    cats = sorted({c for arm in arms for c in summary["reflect_by_category"][arm]})
    if cats:
        lines += ["## reflect_correct by QA category (as labelled in the file)", "",
                  "| category | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
        for c in cats:
            cells = []
            for arm in arms:
                e = summary["reflect_by_category"][arm].get(c)
                cells.append("–" if not e else f"{e['correct']}/{e['rows']}")
            lines.append(f"| {c} | " + " | ".join(cells) + " |")
        lines.append("")
    if summary["comparisons"]:
        lines += ["## Paired differences", "", "| pair | task | metric | a − b [95 % CI] | "
                  "McNemar p | n rows |", "|---|---|---|---|---|---|"]
        for comp, task, m, item in S.paired_differences(summary):
            ci = item["ci"]
            ci_text = "" if ci is None else f" [{ci[0]:.3f}, {ci[1]:.3f}]"
            mc = item.get("mcnemar")
            lines.append(f"| {comp['label']} | {task} | {m} | {item['diff']:+.3f}"
                         f"{ci_text} | {'–' if not mc else format(mc['p'], '.3g')} | "
                         f"{item['n_rows']} |")
        lines.append("")
    lines += schema_lines(summary)
    lines += definition_lines(METRIC_HELP)
    return "\n".join(lines) + "\n"


# --- command line -------------------------------------------------------------------------------

def build_parser() -> Any:
    p = argparse.ArgumentParser(
        prog="eval/studies/external.py",
        description="External diagnostic on a LoCoMo-format file (evaluation only, never "
                    "trained on; not LoCoMo QA accuracy): extraction windows scored against the "
                    "session observations, reflection on QA rows given their evidence turns.")
    p.add_argument("--locomo", required=True, metavar="PATH",
                   help="a LoCoMo-format JSON file (e.g. locomo10.json) that you supply")
    p.add_argument("--arm", action="append", required=True, metavar="NAME=SPEC",
                   help="an arm (repeat): NAME=path.gguf, NAME=ollama:MODEL, "
                        "NAME=http://host:port/v1, or rules")
    p.add_argument("--out", default="runs/external", help="output folder (resumes; "
                   "default runs/external)")
    p.add_argument("--window", type=int, default=8, help="turns per extraction window (8)")
    p.add_argument("--windows", type=int, default=24,
                   help="extraction windows, chosen with --seed (24)")
    p.add_argument("--questions", type=int, default=24,
                   help="QA rows, chosen with --seed (24; 0 for none; -1 for all)")
    p.add_argument("--distractors", type=int, default=0,
                   help="other turns of the conversation added to each QA row's evidence (0)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the window and question choice and of every model arm (0)")
    p.add_argument("--n-ctx", type=int, default=4096, help="context window of every model arm")
    p.add_argument("--threads", type=int, default=None, help="llama.cpp threads")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="cap every attempt's max_tokens (same for every arm)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (2000)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    # the worker as the store runs it (issue 46): as in eval/run.py, or from a release receipt
    p.add_argument("--extract-form", choices=FORMS, default=None,
                   help="the form model arms extract in, as in eval/run.py (default: window, or "
                        "the --release worker's)")
    p.add_argument("--claim-gate", action="append", default=None, metavar="[ARM=]SCORE>=T",
                   help="an arm's claim gate, as in eval/run.py (repeatable)")
    runner.add_propose_option(p)
    p.add_argument("--release", metavar="DIR", default=None,
                   help="run the arm whose GGUF is this release's student as the store's "
                        "worker does: the extraction form, claim gate and proposing of the "
                        "release receipt's `worker` (MemWorkerBackend.from_release)")
    return p


def release_worker(release: str | Path, arms: list[Any]) -> tuple[str, list[str], list[str]]:
    """(extract form, --claim-gate values, --propose values) that run the arm holding the
    release's student GGUF as `MemWorkerBackend.from_release` runs it."""
    folder = Path(release)
    try:
        receipt = json.loads((folder / "release-receipt.json").read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise EvalError(f"--release {folder}: no readable release-receipt.json ({exc})") from None
    student = folder / receipt["student"]["gguf"]
    want = receipt["artifacts"][receipt["student"]["gguf"]]["sha256"]
    arm = next((a for a in arms if a.kind == "gguf" and Path(a.target).is_file()
                and sha256_file(a.target) == want), None)
    if arm is None:
        raise EvalError(f"--release {folder}: no arm is its student {student} (sha256 "
                        f"{want[:12]}…); add --arm student={student}")
    worker = receipt.get("worker") or {}
    gates = [f"{arm.name}={worker['claim_gate']}"] if worker.get("claim_gate") else []
    return worker.get("extract_form", "window"), gates, [arm.name] if worker.get(
        "propose") else []


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _main(args)
    except (LocomoError, EvalError) as exc:
        print(f"external: error: {exc}", file=sys.stderr)
        return 2


def _main(args: Any) -> int:
    arms = [runner.parse_arm(a) for a in args.arm]
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise EvalError(f"arm names must be unique, got {names}")
    form, gates, proposing = args.extract_form, args.claim_gate, args.propose
    if args.release:
        r_form, r_gates, r_propose = release_worker(args.release, arms)
        if form not in (None, r_form) or gates or proposing:
            raise EvalError("--release sets the student's worker; drop --extract-form, "
                            "--claim-gate and --propose")
        form, gates, proposing = r_form, r_gates, r_propose
    form = form or "window"
    arms = runner.assign_gates(arms, gates, form)
    arms = runner.assign_proposals(arms, proposing, form)
    data = load_locomo(args.locomo)
    rows = build_windows(data, args.window, args.windows, args.seed)
    rows += build_questions(data, None if args.questions < 0 else args.questions, args.seed,
                            args.distractors)
    if not rows:
        raise LocomoError(f"{args.locomo}: no extraction window or QA row to run (check "
                          "--windows and --questions)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sampler = Sampler(seed=args.seed, n_ctx=args.n_ctx, threads=args.threads,
                      max_tokens_cap=args.max_tokens, extract_form=form)
    config = {"file": {"path": str(args.locomo), "sha256": data.sha256, "license": data.license,
                       "counts": data.counts(), "notes": dict(sorted(data.notes.items()))},
              "window": args.window, "windows": args.windows, "questions": args.questions,
              "distractors": args.distractors, "seed": args.seed,
              "arms": {a.name: a.spec for a in arms},
              "sampler": {k: v for k, v in asdict(sampler).items() if k != "turn_quotes"},
              "worker": {"extract_form": form,
                         "claim_gates": {a.name: a.claim_gate for a in arms
                                         if a.claim_gate is not None},
                         "proposing": sorted(a.name for a in arms if a.propose),
                         **({"release": str(args.release)} if args.release else {})},
              "gguf": _gguf_hashes(arms), "prompt_sha256": template_hashes(),
              "environment": environment()}
    write_json(out / "config.json", config)
    for arm in arms:
        record = runner.run_arm(arm, rows, out, sampler, progress=not args.no_progress,
                                grader=grade_sample)
        print(f"arm {arm.name}: {record['rows_run']} rows run, {record['rows_skipped']} already "
              f"done", file=sys.stderr)
    samples = runner.read_samples(out / runner.SAMPLES)
    summary = summarise(rows, samples, names, config=config, resamples=args.resamples,
                        seed=args.seed)
    write_json(out / "summary.json", summary)
    (out / "report.md").write_text(report_markdown(summary), "utf-8")
    heads = []
    for arm in names:
        parts = []
        for task in TASKS:
            entry = S.primary_entry(summary, arm, task, PRIMARY)
            if entry and entry["value"] is not None:
                parts.append(f"{PRIMARY[task]} {entry['value']:.3f} (n={entry['n_rows']})")
        heads.append(f"{arm}: " + ", ".join(parts))
    print(f"external diagnostic (not LoCoMo QA accuracy): {len(rows)} rows; " + "; ".join(heads)
          + f" -> {out}/report.md")
    return 0
