"""The `rules` arm: a deterministic extractor / consolidator / answerer, the bar a model must clear.

Written against the task as the prompts state it (prompts/*.txt), with general English sentence
patterns; it does not import the corpus generator's phrase tables. It answers extract in the
*wire* form, consolidate and reflect in the canonical form with its ids given (`answer_text`), and
goes through the same codec (`codec.run`: dynamic schema, verification, one retry) as the model
arms, as a backend whose `generate()` returns JSON text. `RulesBackend.bind(task, inputs)`
gives the per-row backend (the rules read the structured inputs, not the rendered prompt).

- extract: trusted user events, one sentence at a time (sentences that are questions, carry a
  credential or a memory-control instruction, or are negated/undecided are skipped). Patterns
  for where someone lives or works, their job, what they play/speak/use/like, plans, past events
  with a time expression, retractions ("I stopped ...", "no longer") and beliefs ("X thinks ...").
  Subjects: "I" -> the user; "my <relation> <Name>" / "<Name> (my <relation>)" -> "Name (the
  user's relation)"; names, pronouns and bare relations are resolved against people mentioned
  earlier in the episode and in the existing facts (simple coreference; the introducing sentence
  is quoted too). The time expression is the first one `memworker.temporal.find_expressions`
  finds in the sentence. A claim about a subject and predicate an existing fact holds with another
  value is a correction superseding it.
- consolidate: facts about the same subject that share a content word; at most one hedged
  observation ("... probably ...").
- reflect: evidence about the question's subject sharing a content word with the question, the
  newest such item wins; memory-control text is never used; otherwise abstain.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from memworker import wire
from memworker.inference.backends import Generation
from memworker.safety import contains_credential, is_memory_control
from memworker.spans import candidate_spans
from memworker.temporal import find_expressions
from memworker.textnorm import norm, stem

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_NAME = r"[A-Z][a-z]+(?:[-'][A-Z]?[a-z]+)?"
_REL = r"[a-z]+(?:[ -][a-z]+){0,2}"
_PETS = {"dog", "cat", "parrot", "puppy", "kitten", "hamster", "rabbit", "horse", "pet", "bird",
         "tortoise", "turtle", "snake", "guinea pig", "ferret", "lizard", "fish"}
_SKIP = re.compile(r"\?|\b(?:not sure|torn between|undecided|haven't decided|can't decide|"
                   r"either|or maybe|might|considering|thinking about|wondering|suggest|"
                   r"should I|could try)\b", re.I)
_NEGATION = re.compile(r"\b(?:not|n't|never|no)\b", re.I)
_RETRACT = re.compile(r"\b(?:I|we) (?:have |had )?(?:stopped|quit|gave up|no longer|don't "
                      r"(?:\w+ )?anymore)\s*(?P<rest>.*)$", re.I)
_BELIEF = re.compile(rf"^(?P<who>(?:[Mm]y {_REL} {_NAME}|{_NAME}(?: \([^)]*\))?|[Mm]y {_REL}))"
                     r" (?:thinks|reckons|believes|heard|says|figures|suspects|is convinced)"
                     r"(?: that)? (?P<rest>.+)$")
_PLAN = re.compile(r"\b(?:I'm|I am|we're|we are) (?:going|planning|hoping) to (?P<v>.+)$|"
                   r"\b(?:I|we) (?:will|plan to|intend to|am going to|want to|would like to|"
                   r"'d like to|hope to|aim to|need to) (?P<w>.+)$|"
                   r"\b[Tt]he plan is to (?P<x>.+)$", re.I)
#: (regex on the part after the subject, predicate, kind, statement verb)
_PATTERNS: list[tuple[re.Pattern[str], str, str, str]] = [
    (re.compile(r"^(?:live|lives|living|now lives?) in (?P<v>.+)$"), "lives_in", "fact",
     "lives in"),
    (re.compile(r"^(?:moved|relocated|has moved|have moved) to (?P<v>.+)$"), "lives_in", "fact",
     "lives in"),
    (re.compile(r"^(?:is|am|are) (?:now )?based in (?P<v>.+)$"), "lives_in", "fact",
     "lives in"),
    (re.compile(r"^(?:has|have) (?:an apartment|a flat|a house|a place|a home) in (?P<v>.+)$"),
     "lives_in", "fact", "lives in"),
    (re.compile(r"^(?:works?|is working|has been working|have been working) as (?:an? )?"
                r"(?P<v>.+)$"), "job_title", "fact", "works as"),
    (re.compile(r"^(?:works?|is working) (?:at|for) (?P<v>.+)$"), "works_at", "fact",
     "works at"),
    (re.compile(r"^(?:is|am|'s|'m) (?:now )?(?:an?) (?P<v>[a-z]+(?: [a-z]+)?)$"), "job_title",
     "fact", "works as"),
    (re.compile(r"^(?:plays?|is playing) (?:the )?(?P<v>.+)$"), "plays", "fact", "plays"),
    (re.compile(r"^(?:speaks?) (?P<v>.+)$"), "speaks", "fact", "speaks"),
    (re.compile(r"^(?:is|am|are) allergic to (?P<v>.+)$"), "allergic_to", "fact",
     "is allergic to"),
    (re.compile(r"^(?:really )?(?:likes?|loves?|enjoys?|adores?) (?P<v>.+)$"), "likes",
     "preference", "likes"),
    (re.compile(r"^(?:prefers?) (?P<v>.+)$"), "prefers", "preference", "prefers"),
    (re.compile(r"^(?:uses?|switched to|started using|now uses?) (?P<v>.+)$"), "uses_tool",
     "fact", "uses"),
    (re.compile(r"^(?:drives?) (?:an? )?(?P<v>.+)$"), "drives", "fact", "drives"),
]
_GENERIC = re.compile(r"^(?P<verb>[a-z]+(?:s|ed))(?: (?P<prep>at|in|to|for|with|on|from))? "
                      r"(?P<v>.+)$")
_STOP = {"the", "a", "an", "is", "are", "was", "to", "of", "in", "on", "at", "and", "or", "for",
         "with", "by", "their", "they", "has", "have", "does", "do", "did", "what", "which",
         "who", "where", "when", "how", "s", "user", "it", "that", "this", "there", "any",
         "about", "from", "evidence"}
_YES_NO = ("does", "do", "is", "are", "has", "have", "can", "did", "was", "will", "would")


def _words(text: str) -> set[str]:
    return {stem(w) for w in norm(text).split() if w not in _STOP}


def _sentences(text: str) -> list[str]:
    return [s.strip() for line in text.split("\n") for s in _SENTENCE.split(line) if s.strip()]


# --- people -------------------------------------------------------------------------------------

class _People:
    """Names and relations seen so far: first name -> canonical name, relation -> canonical."""

    def __init__(self) -> None:
        self.by_name: dict[str, str] = {}
        self.by_rel: dict[str, str] = {}
        self.intro: dict[str, tuple[int, str]] = {}  # canonical -> (event, sentence)
        self.last: str | None = None

    def add(self, name: str, rel: str | None, where: tuple[int, str] | None) -> str:
        canon = f"{name} (the user's {rel})" if rel else self.by_name.get(name, name)
        self.by_name.setdefault(name, canon)
        if rel:
            self.by_name[name] = canon
            self.by_rel[rel] = canon
        if where is not None:
            self.intro.setdefault(canon, where)
        self.last = canon
        return canon

    def learn_fact_subject(self, subject: str) -> None:
        m = re.match(rf"^({_NAME}) \(the user's ({_REL})\)$", subject)
        if m:
            self.by_name.setdefault(m.group(1), subject)
            self.by_rel.setdefault(m.group(2), subject)


def _subject_type(canon: str) -> str:
    m = re.search(r"\(the user's ([^)]*)\)", canon)
    return "pet" if m and m.group(1) in _PETS else "person"


def _split_subject(text: str, people: _People, where: tuple[int, str] | None
                   ) -> tuple[str, str] | None:
    """(canonical subject, rest of the clause) for a clause that starts with its subject."""
    t = text.strip()
    m = re.match(r"^(?:I|We)(?:'m|'ve| am| have)?\b\s*(?P<rest>.*)$", t)
    if m and re.match(r"^(?:I|We)\b", t):
        rest = m.group("rest")
        if t.startswith(("I'm", "I am")):
            rest = "am " + rest
        return "the user", rest
    m = re.match(rf"^[Mm]y (?P<rel>{_REL}),? (?P<name>{_NAME}),? (?P<rest>.*)$", t)
    if m and m.group("rel").split()[-1] not in ("is", "has", "was"):
        return people.add(m.group("name"), m.group("rel"), where), m.group("rest")
    m = re.match(rf"^(?P<name>{_NAME}) \((?:my|the user's) (?P<rel>[^)]+)\),? (?P<rest>.*)$", t)
    if m:
        return people.add(m.group("name"), m.group("rel"), where), m.group("rest")
    m = re.match(rf"^[Mm]y (?P<rel>{_REL}) (?P<rest>(?:is|lives|works|plays|has|likes|uses|"
                 r"speaks|moved|loves|prefers|drives|enjoys)\b.*)$", t)
    if m and m.group("rel") in people.by_rel:
        canon = people.by_rel[m.group("rel")]
        people.last = canon
        return canon, m.group("rest")
    m = re.match(r"^(?:He|She|They)\b (?P<rest>.*)$", t)
    if m and people.last:
        return people.last, m.group("rest")
    m = re.match(rf"^(?P<name>{_NAME})\b (?P<rest>.*)$", t)
    if m and m.group("name") in people.by_name:
        canon = people.by_name[m.group("name")]
        people.last = canon
        return canon, m.group("rest")
    return None


def _clean_value(value: str, expression: str | None) -> str:
    v = value
    if expression:
        v = v.replace(expression, " ")
    v = re.sub(r",? but not ", ", except ", v)
    v = re.sub(r"\b(?:now|anymore|these days|again|too|as well)\b", " ", v)
    v = " ".join(v.split()).strip(" ,.;:!-")
    return v


def _parse_rest(rest: str) -> tuple[str, str, str, str, bool] | None:
    """(predicate, value, kind, statement verb, generic?) from the clause after its subject."""
    r = rest.strip().rstrip(".!").strip()
    for pattern, predicate, kind, verb in _PATTERNS:
        m = pattern.match(r)
        if m:
            return predicate, m.group("v"), kind, verb, False
    m = _GENERIC.match(r)
    if m and m.group("verb") not in ("is", "was", "has", "does", "thinks", "says"):
        verb = m.group("verb")
        pred = verb if not m.group("prep") else f"{verb}_{m.group('prep')}"
        words = f"{verb} {m.group('prep')}" if m.group("prep") else verb
        return pred, m.group("v"), "fact", words, True
    return None


def _completed(sentence: str, quote: dict[str, Any], expr: str | None) -> dict[str, Any] | None:
    """A dated past action of the user ("I called my grandmother in December")."""
    done = re.match(r"^(?:Finally |Just |Already )?(?:I|We) (?:finally |just |already )?"
                    r"(?P<verb>[a-z]+ed) (?P<rest>.+)$", sentence.rstrip(".!"))
    if not done or expr is None:
        return None
    obj = _clean_value(re.sub(r"\bmy\b", "their", done.group("rest")), expr)
    if not obj:
        return None
    statement = _statement("the user", done.group("verb"), obj)
    return _claim([quote], "the user", "completed", f"{_lemma(done.group('verb'))} {obj}",
                  statement, "event", expr, [], "high")


def _lemma(verb: str) -> str:
    """Base form of a regular past tense: "called" -> "call", "planned" -> "plan",
    "tried" -> "try", "booked" -> "book", "moved" -> "move"."""
    if verb.endswith("ied"):
        return verb[:-3] + "y"
    stem_ = verb[:-2]
    if len(stem_) >= 3 and stem_[-1] == stem_[-2] and stem_[-1] not in "lsz":
        return stem_[:-1]
    if stem_.endswith(("v", "c", "g", "u")) or len(stem_) <= 2 or (
            len(stem_) <= 4 and re.search(r"(?:^|[^aeiou])[aeiou][bcdfgkmpstvz]$", stem_)):
        return stem_ + "e"
    return stem_


def _statement(subject: str, verb: str, value: str | None) -> str:
    who = "The user" if subject == "the user" else subject
    text = f"{who} {verb} {value}" if value else f"{who} {verb}"
    return text.rstrip(" .") + "."


# --- extract ------------------------------------------------------------------------------------

def _existing(inputs: dict[str, Any], people: _People) -> list[dict[str, Any]]:
    out = []
    for fact in inputs["existing_facts"]:
        statement = fact["statement"].strip()
        m = re.match(rf"^(The user(?:'s \w+)?|{_NAME} \([^)]*\)|{_NAME})\s+(.*)$", statement)
        if not m:
            continue
        subject = "the user" if m.group(1).startswith("The user") else m.group(1)
        people.learn_fact_subject(subject)
        parsed = _parse_rest(m.group(2))
        out.append({"id": fact["id"], "subject": subject, "rest": m.group(2),
                    "predicate": parsed[0] if parsed else None,
                    "value": parsed[1] if parsed else None})
    return out


def _quote(event: dict[str, Any], sentence: str) -> dict[str, Any] | None:
    spans = candidate_spans(event["text"])
    if sentence in spans:
        return {"event": event["index"], "quote": sentence}
    stripped = sentence.rstrip(".!")
    return {"event": event["index"], "quote": stripped} if stripped in spans else None


def _claim(quotes, subject, predicate, value, statement, kind, expr, supersedes, confidence):
    return {"quotes": quotes, "subject": {"name": subject, "type": _subject_type(subject)},
            "predicate": re.sub(r"[^a-z0-9_]", "", predicate.lower())[:48] or "states",
            "value": value, "statement": statement, "kind": kind, "time_expression": expr,
            "correction": bool(supersedes), "supersedes": supersedes, "confidence": confidence}


def extract_answer(inputs: dict[str, Any], max_claims: int = 6) -> dict[str, Any]:
    people = _People()
    existing = _existing(inputs, people)
    claims: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for event in inputs["events"]:
        if event["role"] != "user" or not event["trusted"]:
            continue
        for sentence in _sentences(event["text"]):
            if len(claims) >= max_claims:
                break
            claim = _sentence_claim(sentence, event, people, existing)
            if claim is None:
                continue
            key = (norm(claim["subject"]["name"]), claim["predicate"], norm(claim["value"]))
            if key not in seen:
                seen.add(key)
                claims.append(claim)
    return {"claims": claims}


def _sentence_claim(sentence: str, event: dict[str, Any], people: _People,
                    existing: list[dict[str, Any]]) -> dict[str, Any] | None:
    if contains_credential(sentence) or is_memory_control(sentence) or _SKIP.search(sentence):
        return None
    quote = _quote(event, sentence)
    where = (event["index"], sentence)
    expressions = find_expressions(sentence)
    expr = expressions[0] if expressions else None
    retract = _RETRACT.search(sentence)
    if retract and quote:
        rest_words = _words(retract.group("rest"))
        best = max(existing, key=lambda f: len(rest_words & _words(f["rest"])), default=None)
        if best is not None and rest_words & _words(best["rest"]) and best["predicate"]:
            subject = best["subject"]
            statement = _statement(subject, "no longer " + best["rest"].rstrip("."), None)
            return _claim([quote], subject, best["predicate"], None, statement, "retraction",
                          None, [best["id"]], "high")
        return None
    if _NEGATION.search(re.sub(r",? but not .*$", "", sentence)):
        return None
    belief = _BELIEF.match(sentence.rstrip(".!"))
    if belief and quote:
        who = _split_subject(belief.group("who") + " x", people, where)
        inner = re.sub(r",? (?:maybe|perhaps|probably|I think)$", "", belief.group("rest"))
        inner = re.sub(r"\b(?:is|are) (?:now )?an? ", "works as a ", inner, count=1)
        about = _split_subject(inner, people, where)
        if who is None or about is None:
            return None
        parsed = _parse_rest(about[1])
        if parsed is None:
            return None
        predicate, value, _, verb, _ = parsed
        value = _clean_value(value, expr)
        statement = (f"{who[0] if who[0] != 'the user' else 'The user'} thinks "
                     f"{_statement(about[0], verb, value).rstrip('.')}, but it is not confirmed.")
        return _claim([quote], about[0], predicate, value, statement, "belief", None, [],
                      "medium")
    plan = _PLAN.search(sentence.rstrip(".!"))
    if plan and quote:
        value = _clean_value(plan.group("v") or plan.group("w") or plan.group("x"), expr)
        if not value:
            return None
        statement = _statement("the user", "plans to", value)
        return _claim([quote], "the user", "plans_to", value, statement, "plan", expr, [],
                      "medium")
    body = re.sub(r"^(?:Also|So|Anyway|Update|Btw|By the way|Oh|Well|Heads up|FYI|Actually)"
                  r"[,:!.]?\s+", "", sentence)
    split = _split_subject(body, people, where)
    if quote is None:
        return None
    parsed = _parse_rest(split[1]) if split is not None else None
    if parsed is None or parsed[4]:   # no pattern, or only the generic verb pattern
        done = _completed(body, quote, expr)
        if done is not None:
            return done
    if split is None or parsed is None:
        return None
    subject, rest = split
    predicate, value, kind, verb, _ = parsed
    value = _clean_value(value, expr)
    if not value or len(value) > 120:
        return None
    if expr is not None and kind == "fact" and re.match(r"^[a-z]+ed\b", rest.strip()):
        kind = "event"
    quotes = [quote]
    intro = people.intro.get(subject)
    if intro is not None and intro[0] != event["index"]:
        first = _quote({"index": intro[0], "text": intro[1]}, intro[1])
        if first is not None:
            quotes.insert(0, first)
    supersedes = [f["id"] for f in existing
                  if f["subject"] == subject and f["predicate"] == predicate
                  and norm(f["value"]) != norm(value)]
    statement = _statement(subject, verb, value)
    return _claim(quotes, subject, predicate, value, statement, kind, expr, supersedes[:1],
                  "high")


# --- consolidate --------------------------------------------------------------------------------

def _fact_subject(statement: str) -> tuple[str, str]:
    m = re.match(rf"^(The user|{_NAME} \([^)]*\)|{_NAME})\s+(.*)$", statement.strip())
    return (m.group(1), m.group(2)) if m else ("", statement)


def consolidate_answer(inputs: dict[str, Any]) -> dict[str, Any]:
    facts = [(f["id"], *_fact_subject(f["statement"])) for f in inputs["facts"]]
    best: tuple[int, int, int] | None = None
    for i, (_, sa, ra) in enumerate(facts):
        for j in range(i + 1, len(facts)):
            _, sb, rb = facts[j]
            if not sa or sa != sb:
                continue
            shared = len(_words(ra) & _words(rb))
            if shared and (best is None or shared > best[0]):
                best = (shared, i, j)
    if best is None:
        return {"observations": []}
    _, i, j = best
    subject = facts[i][1]
    statement = (f"{subject} probably {facts[i][2].rstrip('.')} and "
                 f"{facts[j][2].rstrip('.')}.")
    return {"observations": [{"statement": statement, "supports": [facts[i][0], facts[j][0]]}]}


# --- reflect ------------------------------------------------------------------------------------

def _question_subject(question: str) -> tuple[str, str] | None:
    """(name to look for in the evidence, the phrase naming it in the question)."""
    m = re.search(rf"({_NAME}) \(the user's [^)]*\)", question)
    if m:
        return m.group(1), m.group(0)
    m = re.search(r"\bthe user(?:'s)?\b", question, re.I)
    if m:
        return "the user", m.group(0)
    m = re.search(rf"\b(?:does|is|did|has|was|about|of) ({_NAME})\b", question)
    return (m.group(1), m.group(1)) if m else None


class ReflectChoice(NamedTuple):
    """What the rules answer a reflection from (`reflect_choice`)."""

    item: dict[str, Any] | None   # the evidence item, or None: they abstain
    q_words: set[str]             # the question's content words beyond its subject's phrase
    held: set[str]                # those of them the item holds
    subject: tuple[str, str] | None   # (name, the phrase naming it), `_question_subject`


def reflect_choice(inputs: dict[str, Any]) -> ReflectChoice:
    """The evidence item the rules answer a reflection from: about the question's subject and
    sharing the most content words with it (the newest of a tie); memory controls and
    credential-shaped text are never chosen."""
    question = inputs["question"]
    found = _question_subject(question)
    subject = found[0] if found else None
    q_words = _words(question) - (_words(found[1]) if found else set())
    candidates = []
    for item in inputs["evidence"]:
        text = item["text"]
        if is_memory_control(text) or contains_credential(text) or subject is None:
            continue
        about = (text.lower().startswith("the user") if subject == "the user"
                 else re.search(rf"\b{re.escape(subject)}\b", text) is not None)
        overlap = q_words & _words(text)
        if about and overlap:
            candidates.append((len(overlap), item["timestamp"], item, overlap))
    if not candidates:
        return ReflectChoice(None, q_words, set(), found)
    top = max(c[0] for c in candidates)
    chosen = max((c for c in candidates if c[0] == top), key=lambda c: c[1])
    return ReflectChoice(chosen[2], q_words, chosen[3], found)


def reflect_answer(inputs: dict[str, Any]) -> dict[str, Any]:
    question = inputs["question"]
    chosen, q_words, _, _ = reflect_choice(inputs)
    if chosen is None:
        missing = " ".join(sorted(q_words)) or "the answer"
        return {"answer": f"The evidence does not say ({missing}).", "citations": [],
                "insufficient_evidence": True}
    text = chosen["text"].strip()
    if question.split()[0].lower() in _YES_NO:
        text = ("No. " if re.search(r"\b(?:no longer|not|never)\b", text) else "Yes. ") + text
    return {"answer": text, "citations": [chosen["id"]], "insufficient_evidence": False}


# --- backend ------------------------------------------------------------------------------------

ANSWERS = {"extract": extract_answer, "consolidate": consolidate_answer,
           "reflect": reflect_answer}


def answer_text(task: str, answer: dict[str, Any]) -> str:
    """The rules' answer as the text the codec reads: an extract answer in wire form (a claim
    keeps what the model would write; the codec derives the statement, correction flag and
    confidence, as it does for every arm); a consolidate or reflect answer in canonical form,
    compact, its supports / citations given (the codec keeps and verifies them: the rules choose
    their ids, the model's are read from its text, wire v4)."""
    if task != "extract":
        return json.dumps(answer, ensure_ascii=False, separators=wire.SEPARATORS)
    return wire.dump_answer(task, {"claims": [{k: c[k] for k in wire.RECORD_KEYS}
                                              for c in answer["claims"]]})


class RulesBackend:
    """Backend-shaped rules: `bind(task, inputs)` returns an object whose `generate()` returns the
    rules' wire answer as JSON text (the same on a retry: the rules are deterministic)."""

    name = "rules"

    def bind(self, task: str, inputs: dict[str, Any]) -> _BoundRules:
        return _BoundRules(task, inputs)


class _BoundRules:
    name = "rules"

    def __init__(self, task: str, inputs: dict[str, Any]):
        self.task, self.inputs = task, inputs

    def generate(self, messages, *, schema=None, grammar=None, max_tokens: int,
                 temperature: float = 0.0, seed: int = 0) -> Generation:
        answer = ANSWERS[self.task](self.inputs)
        return Generation(text=answer_text(self.task, answer),
                          finish_reason="stop",
                          backend=self.name)
