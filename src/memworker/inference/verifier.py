"""The claim verifier: a learned keep/drop decision for one decoded extract claim, judged against
the window it quotes.

The log-probability gate (`gate.py`) ranks right against wrong claims at chance on real
conversation (issue 47). The verifier reads the claim and the request instead: `features(claim,
inputs)` describes one canonical claim (as the codec outputs it: subject, predicate, value, kind,
quotes, source_indices, time_expression, supersedes) against the request's events and existing
facts — is the value in its quote, is the quoted sentence negated, hedged, a question or a
suggestion, who said it (the user, the other speaker, a tool), is the subject the one the sentence
is about, does a later user message correct it, does the kind fit the tense, how well the quote's
and the value's words fit the predicate (`Cues`, a table of word counts per predicate learned from
training gold). `Verifier` is an L2 logistic regression over those features, trained by
`train/verifier.py` (`memworker.train.verifier`) on the training splits only and stored in
`verifier.json` beside this file (feature means and scales, weights, the cue table, provenance).

    verifier = Verifier.load()                   # the committed weights
    p = verifier.prob(claim, row["input"])       # P(keep)
    kept = [c for c in claims if verifier.prob(c, inputs) >= 0.5]

Pure Python and numpy-free: what the store runs.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from memworker import ontology
from memworker.safety import contains_credential, is_memory_control
from memworker.spans import sentence_offsets
from memworker.textnorm import bare_name, hedged, is_user, norm, stem, value_key

VERSION = 1
#: the committed weights (`train/verifier.py` writes them)
DEFAULT_WEIGHTS = Path(__file__).with_name("verifier.json")

#: function words: left out of a value's or a quote's content words
STOP = frozenset((
    "a", "an", "the", "and", "or", "but", "of", "to", "in", "on", "at", "for", "with", "by", "from",
    "as", "is", "are", "was", "were", "be", "been", "am", "it", "its", "this", "that", "these",
    "those", "i", "me", "my", "we", "our", "us", "you", "your", "he", "she", "his", "her", "him",
    "they", "their", "them", "s", "t", "m", "ll", "ve", "re", "d", "do", "does", "did", "so",
    "just", "up", "out", "about", "into", "than", "then", "there", "here", "what", "which", "who",
    "how", "when", "where", "have", "has", "had", "will", "would", "can", "could", "not", "no",
    "yes", "oh", "ok", "okay", "too", "very", "really", "also", "all", "some", "any", "one",
    "user"))
FIRST = frozenset(("i", "me", "my", "mine", "myself", "we", "us", "our", "ours"))
SECOND = frozenset(("you", "your", "yours", "yourself"))
THIRD = frozenset(("he", "she", "him", "her", "his", "hers", "they", "them", "their", "theirs"))
PRONOUNS = FIRST | SECOND | THIRD | {"it"}
#: the words a value may not begin with when it is a well-formed head phrase
FUNCTION_START = frozenset((
    "to", "with", "of", "for", "on", "at", "by", "from", "that", "which", "who", "and", "or",
    "but", "is", "are", "was", "were", "be", "it", "this", "there", "so", "if", "not", "no", "get",
    "got"))
#: relation nouns ("my partner", "my manager"): the sentence is about someone else
RELATIONS = frozenset((
    "partner", "wife", "husband", "boyfriend", "girlfriend", "fiance", "fiancee", "mum", "mom",
    "mother", "dad", "father", "sister", "brother", "son", "daughter", "kid", "kids", "child",
    "aunt", "uncle", "cousin", "nephew", "niece", "gran", "grandma", "grandpa", "grandmother",
    "grandfather", "friend", "flatmate", "roommate", "housemate", "neighbour", "neighbor",
    "colleague", "coworker", "manager", "boss", "mentor", "coach", "trainer", "teacher",
    "professor", "tutor", "student", "client", "landlord", "landlady", "doctor", "therapist",
    "dentist", "coordinator", "assistant", "team", "teammate", "bandmate", "in-laws", "family",
    "buddy", "mate", "ex", "stepdad", "stepmum", "godmother", "godfather", "lead", "supervisor",
    "worker", "carer"))
_NEG = frozenset(("not", "no", "never", "nor", "none", "without", "nothing", "nobody", "neither",
                  "cannot", "nope", "nah", "t", "anymore"))
_NEG_PHRASE = re.compile(r"\b(?:no longer|any ?more|not any)\b")
_CORRECTION = re.compile(
    r"\b(?:actually|instead|scratch that|correction|change of plans?|changed|no longer|any ?more|"
    r"cancel(?:l?ed)?|never mind|nevermind|moved|wrong|mistake|misread|switch(?:ed)?|"
    r"turns? out|update|not anymore|rather|called off|fell through|dropped|quit)\b", re.I)
_CONDITIONAL = re.compile(
    r"\b(?:if|would|could|might|maybe|perhaps|considering|thinking (?:about|of)|wonder(?:ing)?|"
    r"someday|one day|dream|wish|hypothetically|in theory|tempted|undecided|torn)\b", re.I)
_SUGGESTION = re.compile(
    r"\b(?:you could|how about|what about|would you like|why not|i suggest|i(?:'d| would) "
    r"recommend|you might|you should|options?|alternatively|shall i|should i|do you want|"
    r"want me to|consider|try)\b", re.I)
_REJECT = re.compile(r"^\W*(?:no|nah|nope|not|rather not|i'?d rather|i'?ll pass|pass|skip|"
                     r"none of|neither|don'?t|actually)\b", re.I)
_FUTURE = re.compile(
    r"\b(?:will|going to|gonna|'ll|plan(?:ning|s)?|next|tomorrow|tonight|soon|later|upcoming|"
    r"booked|scheduled|this (?:weekend|week|month|year|monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday|morning|afternoon|evening)|on (?:monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday)|in \w+ (?:days|weeks|months)|want to|hoping to|about to|intend)\b|'ll\b",
    re.I)
_PAST = re.compile(
    r"\b(?:yesterday|last|ago|went|was|were|did|had|finished|completed|used to|got|made|saw|met|"
    r"bought|took|ran|came|already|earlier)\b|\b\w{3,}ed\b", re.I)
_MY_RELATION = re.compile(r"\b(?:my|our|his|her|their) (?:\w+ )?(" + "|".join(
    sorted(RELATIONS, key=len, reverse=True)) + r")s?\b", re.I)
#: words a well-cut value follows ("in Utrecht", "as a nurse", "my partner") ...
BEFORE_VALUE = frozenset((
    "in", "at", "to", "as", "the", "a", "an", "my", "our", "with", "from", "for", "on", "by",
    "of", "called", "named", "is", "are", "was", "am", "m", "re", "s", "into", "near", "use",
    "uses", "using", "like", "love", "loves", "likes", "prefer", "prefers", "play", "plays",
    "learning", "moved", "moving", "work", "works", "working", "go", "going", "visit", "visiting"))
#: ... and the words that may follow it ("Utrecht since May", "a nurse and")
AFTER_VALUE = frozenset((
    "from", "since", "until", "on", "at", "in", "by", "because", "for", "with", "and", "but",
    "or", "so", "as", "after", "before", "during", "every", "each", "per", "when", "while",
    "which", "who", "that", "near", "this", "next", "last", "today", "tomorrow", "now", "again",
    "too", "also", "now", "these", "days", "lol", "haha"))
KINDS = ("fact", "plan", "event", "preference", "relationship", "belief", "retraction")

FEATURES: tuple[str, ...] = (
    # the value against its quote and the window
    "value_none", "value_verbatim_quote", "value_share_quote", "value_share_sentence",
    "value_share_window", "value_words", "value_quote_ratio", "value_pronoun",
    "value_function_start", "value_is_name", "value_in_existing", "value_secret",
    "value_proper", "value_after_function", "value_before_break",
    # the quoted sentence and its speaker
    "src_user", "src_assistant", "src_untrusted", "src_control", "n_quotes", "quote_words",
    "quote_question", "quote_negation", "neg_near_value", "quote_hedge", "quote_conditional",
    "quote_suggestion", "quote_first_person", "quote_second_person", "quote_third_person",
    "quote_my_relation",
    # what comes after the quote
    "later_correction", "later_negates_value", "later_mentions_value", "reply_rejects",
    "existing_stale",
    # the subject
    "subj_user", "named_in_quote", "named_in_window", "named_in_existing", "named_long",
    "named_lowercase", "named_relation_in_window", "user_quote_first_person",
    "user_quote_other_person", "user_src_other", "user_relationship",
    # kind and time
    *(f"kind_{k}" for k in KINDS), "future_cue", "past_cue", "plan_future", "plan_past",
    "event_past", "event_future", "fact_future", "time_expr", "time_expr_in_quote",
    "supersedes", "supersedes_correction", "retraction_negation",
    # the predicate against the words (the cue table)
    "pred_relationship", "pred_words_in_quote", "pred_quote_aff", "pred_quote_gap",
    "pred_value_aff", "pred_value_gap",
)

#: features computed (and shown by `features`) that the regression leaves out, with the reason
UNUSED = {
    # the training negatives' values are cut from their quotes, the gold's are often paraphrased
    # ("drive down" for "I'm driving down"): verbatim containment learns that artifact (a
    # negative weight); the share of the value's content words found in the quote does not
    "value_verbatim_quote": "an artifact of how the negatives are made",
}
#: the regression's inputs
MODEL_FEATURES: tuple[str, ...] = tuple(n for n in FEATURES if n not in UNUSED)


class VerifierError(ValueError):
    """A verifier weights file that cannot be used (missing, not JSON, wrong version or shape)."""


def words(text: str | None) -> list[str]:
    """Normalised word tokens ("Don't" -> "don", "t")."""
    return norm(text).split()


def content_stems(text: str | None) -> list[str]:
    """Stems of the content words of `text`, in order, repeats removed."""
    return list(dict.fromkeys(stem(w) for w in words(text) if w not in STOP))


def _share(needles: Sequence[str], haystack: set[str]) -> float:
    return sum(n in haystack for n in needles) / len(needles) if needles else 0.0



def _contains(text: str, phrase: str) -> bool:
    return bool(phrase) and f" {phrase} " in f" {text} "


def quote_sentences(claim: dict[str, Any], events: dict[int, dict[str, Any]]
                    ) -> list[tuple[dict[str, Any], str, str, int]]:
    """(event, quote, its whole sentence(s), the quote's end offset) for each quote of a claim
    whose event is in the window (a quote not found in its event stands for itself)."""
    out = []
    for quote, index in zip(claim.get("quotes") or [], claim.get("source_indices") or [],
                            strict=False):
        event = events.get(index)
        if event is None:
            continue
        text = event["text"]
        at = text.find(quote)
        if at < 0:
            out.append((event, quote, quote, len(text)))
            continue
        end = at + len(quote)
        pieces = [text[a:b] for a, b in sentence_offsets(text) if a < end and b > at]
        out.append((event, quote, " ".join(pieces) or quote, end))
    return out


def _is_user_event(event: dict[str, Any]) -> bool:
    return event["role"] == "user" and bool(event.get("trusted", True))


def _neg_near(tokens: list[str], value_stems: Sequence[str]) -> bool:
    """A negation within four words before the value's first content word, or "no longer",
    "any more" within four after its last."""
    hits = [i for i, t in enumerate(tokens) if stem(t) in value_stems]
    if not hits:
        return False
    first, last = hits[0], hits[-1]
    if set(tokens[max(0, first - 4):first]) & _NEG:
        return True
    return _NEG_PHRASE.search(" ".join(tokens[last + 1:last + 5])) is not None


def _negated(text: str) -> bool:
    tokens = words(text)
    return bool(set(tokens) & _NEG) or _NEG_PHRASE.search(" ".join(tokens)) is not None


def _cut(sentence: str, value: str | None) -> tuple[float, float]:
    """Where the value sits in its sentence: (it follows a word a value follows, it ends where a
    phrase ends: at punctuation, the sentence's end or a word that begins a qualifier); (0, 0)
    where the sentence does not hold it."""
    key = (value or "").strip()
    for article in ("the ", "a ", "an "):
        if key.lower().startswith(article) and key.lower() not in sentence.lower():
            key = key[len(article):]
    if not key:
        return 0.0, 0.0
    m = re.search(rf"(?<![\w-]){re.escape(key)}(?![\w-])", sentence, re.I)
    if m is None:
        return 0.0, 0.0
    before = words(sentence[:m.start()])
    after_text = sentence[m.end():].lstrip()
    after = words(after_text)
    starts = not before or before[-1] in BEFORE_VALUE or sentence[:m.start()].rstrip()[-1:] in \
        ",:;(-—–\"'"
    ends = not after or after_text[:1] in ",.;:!?)—–-\"'" or after[0] in AFTER_VALUE
    return float(starts), float(ends)


class Cues:
    """Word counts per predicate from training gold: for the quote's sentence ("quote") and for
    the value ("value"). `affinity(field, predicate, stems)` is the mean over the stems the table
    knows of the smoothed log-ratio log P(w | predicate) - log P(w) (add-`alpha` smoothing), and
    its gap to the best predicate among `others` (0 when the claimed one is the best)."""

    def __init__(self, table: dict[str, Any]):
        self.table = table
        self.alpha = float(table["alpha"])
        self._prep = {}
        for field in ("quote", "value"):
            t = table[field]
            vocab = len(t["words"]) or 1
            base = {w: math.log((c + self.alpha) / (t["total"] + self.alpha * vocab))
                    for w, c in t["words"].items()}
            preds = {p: (d["words"], math.log(d["total"] + self.alpha * vocab))
                     for p, d in t["predicates"].items()}
            self._prep[field] = (base, preds)

    def affinity(self, field: str, predicate: str, stems: Iterable[str],
                 others: Iterable[str] = ()) -> tuple[float, float]:
        base, preds = self._prep[field]
        known = [w for w in dict.fromkeys(stems) if w in base]
        if not known or predicate not in preds:
            return 0.0, 0.0

        def score(p: str) -> float:
            counts, log_total = preds[p]
            return sum(math.log(counts.get(w, 0) + self.alpha) - log_total - base[w]
                       for w in known) / len(known)

        own = score(predicate)
        best = max([own, *(score(p) for p in others if p in preds and p != predicate)])
        return own, own - best

    @staticmethod
    def count(examples: Iterable[tuple[Any, ...]], alpha: float = 0.5,
              min_count: int = 2) -> dict[str, Any]:
        """The table from (gold claim, inputs) pairs, or (gold claim, inputs, times) with a whole
        number of times to count it: per field, each word stem's count overall and per predicate
        (stems seen fewer than `min_count` times left out)."""
        raw: dict[str, dict[str, dict[str, int]]] = {"quote": {}, "value": {}}
        for claim, inputs, *times in examples:
            qstems, vstems = cue_stems(claim, inputs)
            for field, stems in (("quote", qstems), ("value", vstems)):
                per = raw[field].setdefault(claim["predicate"], {})
                for w in stems:
                    per[w] = per.get(w, 0) + (times[0] if times else 1)
        table: dict[str, Any] = {"alpha": alpha, "min_count": min_count}
        for field, per_pred in raw.items():
            overall: dict[str, int] = {}
            for counts in per_pred.values():
                for w, c in counts.items():
                    overall[w] = overall.get(w, 0) + c
            kept = {w: c for w, c in sorted(overall.items()) if c >= min_count}
            preds = {}
            for p, counts in sorted(per_pred.items()):
                mine = {w: c for w, c in sorted(counts.items()) if w in kept}
                preds[p] = {"total": sum(mine.values()), "words": mine}
            table[field] = {"total": sum(kept.values()), "words": kept, "predicates": preds}
        return table


def cue_stems(claim: dict[str, Any], inputs: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The content-word stems of a claim's quoted sentences and of its value: what the cue table
    counts and what `features` looks up."""
    events = {e["index"]: e for e in inputs["events"]}
    sentences = " ".join(s for _, _, s, _ in quote_sentences(claim, events))
    return content_stems(sentences), content_stems(claim.get("value"))


def _later_user_sentences(claim: dict[str, Any], quoted: list[tuple[dict[str, Any], str, str, int]],
                          events: list[dict[str, Any]]) -> list[str]:
    """The user's sentences after the claim's last quote: the rest of its event, then every later
    trusted user event."""
    if not quoted:
        return []
    last = max(quoted, key=lambda q: (q[0]["index"], q[3]))
    event, _, _, end = last
    out = []
    if _is_user_event(event):
        rest = event["text"][end:]
        out += [rest[a:b] for a, b in sentence_offsets(rest)]
    for e in events:
        if e["index"] > event["index"] and _is_user_event(e):
            out += [e["text"][a:b] for a, b in sentence_offsets(e["text"])]
    return out


def features(claim: dict[str, Any], inputs: dict[str, Any], cues: Cues | None = None
             ) -> dict[str, float]:
    """The verifier's features (`FEATURES`, each a float) of one canonical extract claim against
    the request `inputs` (its events and existing facts); the cue-table features are 0 without
    `cues`."""
    events = sorted(inputs["events"], key=lambda e: e["index"])
    by_index = {e["index"]: e for e in events}
    quoted = quote_sentences(claim, by_index)
    f: dict[str, float] = dict.fromkeys(FEATURES, 0.0)
    quote_text = " ".join(q for _, q, _, _ in quoted)
    sentence_text = " ".join(s for _, _, s, _ in quoted)
    quote_norm = norm(quote_text)
    sentence_tokens = words(sentence_text)
    quote_stems = {stem(w) for w in words(quote_text)}
    sentence_stems = {stem(w) for w in sentence_tokens}
    window_stems = {stem(w) for e in events for w in words(e["text"])}
    existing = [norm(x.get("statement")) for x in inputs.get("existing_facts") or []]

    value = claim.get("value")
    value_tokens = words(value)
    value_stems = content_stems(value) or [stem(w) for w in value_tokens]
    key = value_key(value)
    f["value_none"] = float(not key)
    f["value_verbatim_quote"] = float(_contains(quote_norm, key))
    f["value_share_quote"] = _share(value_stems, quote_stems)
    f["value_share_sentence"] = _share(value_stems, sentence_stems)
    f["value_share_window"] = _share(value_stems, window_stems)
    f["value_words"] = math.log1p(len(value_tokens))
    f["value_quote_ratio"] = min(2.0, len(key) / len(quote_norm)) if quote_norm else 0.0
    f["value_pronoun"] = float(bool(set(value_tokens) & PRONOUNS))
    first_word = key.split()[0] if key else ""
    f["value_function_start"] = float(first_word in FUNCTION_START)
    name = claim["subject"]["name"]
    f["value_is_name"] = float(bool(key) and (key == norm(bare_name(name)) or is_user(key)))
    f["value_in_existing"] = float(bool(value_stems) and any(
        _share(value_stems, {stem(w) for w in x.split()}) == 1.0 for x in existing))
    f["value_secret"] = float(bool(value) and contains_credential(value))
    f["value_proper"] = float(any(w[:1].isupper() for w in (value or "").split()[1:])
                              or (value or "")[:1].isupper())

    cut = _cut(sentence_text, value)
    f["value_after_function"], f["value_before_break"] = cut

    n = len(quoted) or 1
    f["src_user"] = sum(_is_user_event(e) for e, *_ in quoted) / n
    f["src_assistant"] = sum(e["role"] == "assistant" for e, *_ in quoted) / n
    f["src_untrusted"] = sum(e["role"] == "tool" or not e.get("trusted", True)
                             for e, *_ in quoted) / n
    f["src_control"] = float(any(is_memory_control(e["text"]) for e, *_ in quoted))
    f["n_quotes"] = float(len(quoted))
    f["quote_words"] = math.log1p(len(quote_norm.split()))
    f["quote_question"] = float(any(s.rstrip().endswith("?") or q.rstrip().endswith("?")
                                    for _, q, s, _ in quoted))
    f["quote_negation"] = float(_negated(sentence_text))
    f["neg_near_value"] = float(_neg_near(sentence_tokens, value_stems))
    f["quote_hedge"] = float(hedged(sentence_text))
    f["quote_conditional"] = float(_CONDITIONAL.search(sentence_text) is not None)
    f["quote_suggestion"] = float(_SUGGESTION.search(sentence_text) is not None)
    tokens = set(sentence_tokens)
    f["quote_first_person"] = float(bool(tokens & FIRST))
    f["quote_second_person"] = float(bool(tokens & SECOND))
    f["quote_third_person"] = float(bool(tokens & THIRD))
    f["quote_my_relation"] = float(_MY_RELATION.search(sentence_text) is not None)

    later = _later_user_sentences(claim, quoted, events)
    mentions = [s for s in later if value_stems and _share(value_stems, {
        stem(w) for w in words(s)}) >= 0.5]
    f["later_correction"] = float(any(_CORRECTION.search(s) for s in later))
    f["later_negates_value"] = float(any(_CORRECTION.search(s) or _negated(s) for s in mentions))
    f["later_mentions_value"] = float(bool(mentions))
    if quoted and quoted[-1][0]["role"] == "assistant":
        reply = next((e for e in events if e["index"] > quoted[-1][0]["index"]
                      and e["role"] == "user"), None)
        f["reply_rejects"] = float(reply is not None and _REJECT.search(reply["text"]) is not None)
    user_text = " ".join(e["text"] for e in events if _is_user_event(e))
    f["existing_stale"] = float(bool(f["value_in_existing"]) and bool(_CORRECTION.search(user_text)))

    user = is_user(name)
    bare = norm(bare_name(name))
    relation = re.search(r"'s ([^)]+)\)", name)
    f["subj_user"] = float(user)
    if not user:
        f["named_in_quote"] = float(_contains(norm(sentence_text), bare))
        f["named_in_window"] = float(any(_contains(norm(e["text"]), bare) for e in events))
        f["named_in_existing"] = float(any(_contains(x, bare) for x in existing))
        f["named_long"] = float(len(bare.split()) > 3)
        f["named_lowercase"] = float(not bare_name(name)[:1].isupper())
        f["named_relation_in_window"] = float(relation is not None and any(
            _contains(norm(e["text"]), norm(relation.group(1))) for e in events))
    else:
        f["user_quote_first_person"] = f["quote_first_person"]
        f["user_quote_other_person"] = float(bool(f["quote_my_relation"])
                                             or bool(tokens & {"he", "she", "they"}))
        f["user_src_other"] = 1.0 - f["src_user"]
        f["user_relationship"] = float(claim["predicate"] == "relationship")

    kind = claim.get("kind")
    for k in KINDS:
        f[f"kind_{k}"] = float(kind == k)
    future = _FUTURE.search(sentence_text) is not None
    past = _PAST.search(sentence_text) is not None
    f["future_cue"], f["past_cue"] = float(future), float(past)
    f["plan_future"] = float(kind == "plan" and future)
    f["plan_past"] = float(kind == "plan" and past and not future)
    f["event_past"] = float(kind == "event" and past)
    f["event_future"] = float(kind == "event" and future and not past)
    f["fact_future"] = float(kind == "fact" and future and not past)
    expression = claim.get("time_expression")
    f["time_expr"] = float(bool(expression))
    f["time_expr_in_quote"] = float(bool(expression) and _contains(norm(sentence_text),
                                                                  norm(expression)))
    f["supersedes"] = float(bool(claim.get("supersedes")))
    f["supersedes_correction"] = float(bool(claim.get("supersedes"))
                                       and _CORRECTION.search(sentence_text) is not None)
    f["retraction_negation"] = float(kind == "retraction" and bool(f["quote_negation"]))

    predicate = claim["predicate"]
    f["pred_relationship"] = float(predicate == "relationship")
    pred_stems = [stem(w) for w in predicate.split("_") if w not in STOP and len(w) > 2]
    f["pred_words_in_quote"] = _share(pred_stems, sentence_stems)
    if cues is not None:
        others = ontology.vocabulary(inputs)
        qstems, vstems = content_stems(sentence_text), content_stems(value)
        f["pred_quote_aff"], f["pred_quote_gap"] = cues.affinity("quote", predicate, qstems,
                                                                 others)
        f["pred_value_aff"], f["pred_value_gap"] = cues.affinity("value", predicate, vstems,
                                                                 others)
    return f


class Verifier:
    """P(keep) of an extract claim: a logistic regression over `features`, its weights and cue
    table read from a JSON file (`train/verifier.py` writes it)."""

    def __init__(self, weights: dict[str, Any], source: str = "<dict>"):
        problem = _problem(weights)
        if problem:
            raise VerifierError(f"{problem}: verifier weights {source}")
        self.source = source
        self.weights = weights
        self.names = list(weights["features"])
        self.mean = [float(x) for x in weights["mean"]]
        self.scale = [float(x) for x in weights["scale"]]
        self.coef = [float(x) for x in weights["weights"]]
        self.bias = float(weights["bias"])
        self.cues = Cues(weights["cues"])

    @classmethod
    def load(cls, path: str | Path = DEFAULT_WEIGHTS) -> Verifier:
        path = Path(path)
        try:
            text = path.read_text("utf-8")
        except FileNotFoundError:
            raise VerifierError(f"no such file: verifier weights {path} (train them with "
                                "`python train/verifier.py`)") from None
        except OSError as exc:
            raise VerifierError(f"cannot read ({exc.strerror}): verifier weights {path}") from None
        try:
            weights = json.loads(text)
        except json.JSONDecodeError as exc:
            raise VerifierError(f"not JSON ({exc.msg}, line {exc.lineno}): verifier weights "
                                f"{path}") from None
        return cls(weights, str(path))

    def score(self, claim: dict[str, Any], inputs: dict[str, Any]) -> float:
        """The linear score (log-odds of keep)."""
        f = features(claim, inputs, self.cues)
        return self.bias + sum(w * (f[n] - m) / s for n, m, s, w in zip(
            self.names, self.mean, self.scale, self.coef, strict=True))

    def prob(self, claim: dict[str, Any], inputs: dict[str, Any]) -> float:
        """P(keep) of one canonical claim against its request."""
        z = self.score(claim, inputs)
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    def probs(self, claims: Sequence[dict[str, Any]], inputs: dict[str, Any]) -> list[float]:
        return [self.prob(c, inputs) for c in claims]


def _problem(w: Any) -> str | None:
    """Why a weights object cannot be used, or None."""
    if not isinstance(w, dict):
        return "not a JSON object"
    if w.get("version") != VERSION:
        return f"version {w.get('version')!r}, this code reads version {VERSION}"
    for key in ("features", "mean", "scale", "weights", "bias", "cues"):
        if key not in w:
            return f"no {key!r}"
    names = w["features"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return "'features' is not a list of names"
    if set(names) - set(FEATURES) or len(set(names)) != len(names):
        return f"features this code does not compute or repeated ({sorted(set(names) - set(FEATURES))})"
    for key in ("mean", "scale", "weights"):
        values = w[key]
        if not isinstance(values, list) or len(values) != len(names) or not all(
                isinstance(x, (int, float)) and math.isfinite(x) for x in values):
            return f"{key!r} is not {len(names)} finite numbers"
    if any(x <= 0 for x in w["scale"]):
        return "a feature scale is not positive"
    if not isinstance(w["bias"], (int, float)) or not math.isfinite(w["bias"]):
        return "'bias' is not a finite number"
    cues = w["cues"]
    if not isinstance(cues, dict) or "alpha" not in cues or not all(
            isinstance(cues.get(k), dict) and {"total", "words", "predicates"} <= set(cues[k])
            for k in ("quote", "value")):
        return "'cues' is not a cue table (alpha, quote, value)"
    return None
