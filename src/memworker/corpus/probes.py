"""Transfer measurements of a corpus (issue 11, item 5): skeleton overlap and shortcut probes.

Both work on rows in the canonical format (id, task, split, domain, family, episode,
behaviours, input, gold, truth), so they measure whatever generator produced the rows. Every
probe is trained on the train split and scored on test; each returns its figure, its target and
whether it passes (figure <= target). All figures are deterministic (no randomness, fixed
iteration order) and computed in a few seconds for a default-sized corpus.

Masked sentence skeletons (`Masker`)
------------------------------------
A sentence is reduced to its surface template by replacing, in this order:

1. the episode's own world values: every string in a row's `truth` under the keys subject,
   value, believer, exception, time_expression, stale and (forbidden) text, and the first name of
   a subject "Emily (the user's roommate)" -> <v> (values and names) or <d> (time expressions);
   strings under 3 characters and "the user" are not masked;
2. dates by rule: weekdays, month names, today/tonight/tomorrow/yesterday, "this/next/last
   <period>", "in N <unit>", "N <unit> ago", ordinals ("the 16th"), ISO dates and clock times
   -> <d>;
3. credential-shaped tokens (a word of 8+ characters mixing letters and digits) -> <s>;
4. any token with a digit -> <#>;
5. capitalised words that are not the sentence's first word, and any word that is a name token
   somewhere in the corpus's truth (capitalised words of subjects) -> <v>;

then lower-cased, punctuation removed, whitespace collapsed and runs of the same mask merged.
Sentences: each event's text split into lines, then at . ! ? followed by space (not after "Mr.",
"Dr.", "e.g.": `memworker.spans`), per role (user, assistant, tool); every distinct event of an
episode counts once even when several extract windows show it.

Probes
------
- `keyword_kind`: six fixed keyword regexes (belief, plan, correction, preference,
  relationship, past event) over a claim's quotes give a 6-bit signature; train learns the most
  frequent kind per signature; figure = kind accuracy on test claims (target <= 0.70).
- `correction_regex`: one regex (actually, correction, no longer, anymore, instead, changed,
  scratch that, ...) over a claim's quotes, learned mapping to is_correction; figure = balanced
  accuracy (mean recall of corrections and non-corrections, so a rare class cannot hide behind
  the majority; target <= 0.70). Accuracy and the majority share are reported too.
- `skeleton_lookup`: every candidate span (`memworker.spans.candidate_spans`) of a user or tool
  event is quoted by some gold claim or not; train learns which skeletons are quoted (quoted in at
  least half of their train occurrences); on test a span is predicted quoted when its skeleton
  is; figure = recall of gold quotes (target <= 0.40), precision reported.
- `reflect_timestamp`: each evidence item is described only by its position, its id number, its
  timestamp's clock time (noon? round hour?), its rank by time and its age relative to
  `asked_at`; train learns P(cited) per description (backing off to coarser descriptions); on
  test a row is predicted to cite the items with P >= 0.5 and to abstain when none; figure = rows
  whose outcome (abstain, or the exact citation set) is right; target <= the majority outcome's
  share on test + 0.10 (the majority outcome is the most frequent outcome of train: in practice
  "abstain"). Second condition for a pass: on answerable rows, the citations chosen the same way
  (the most probable item when none reaches 0.5) are exactly right at most 0.10 above chance
  (`citation_chance`: picking one evidence item uniformly at random).
- `pair_table`: consolidate rows; every input fact is keyed by its predicate when the truth
  names one for its id, else by its skeleton; train learns (key, key) -> observation skeleton;
  on test the table fires on every pair of facts with a known key pair; a row is right when the
  predicted (supports, observation skeleton) set equals the gold one (rows without an
  observation are right when nothing fires); figure = row accuracy (target <= 0.50).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from memworker.spans import candidate_spans
from memworker.temporal import parse_timestamp

SPLITS = ("train", "val", "test")
ROLES = ("user", "assistant", "tool")
TARGETS = {
    "skeleton_overlap_test": 0.20,
    "keyword_kind": 0.70,
    "correction_regex": 0.70,
    "skeleton_lookup_recall": 0.40,
    "reflect_timestamp_margin": 0.10,
    "pair_table": 0.50,
}

# ------------------------------------------------------------------------------ masking

_WEEKDAY = r"(?:mon|tues|wednes|thurs|fri|satur|sun)days?"
_MONTH = (r"(?:january|february|march|april|may|june|july|august|september|october|november|"
          r"december|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)")
_NUMWORD = r"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a couple of)"
_UNIT = r"(?:days?|weeks?|months?|years?|hours?|minutes?)"
_DATE_RULE = re.compile(
    rf"\b(?:(?:this|next|last)\s+(?:{_WEEKDAY}|week(?:end)?|month|year|morning|night)"
    rf"|{_WEEKDAY}|(?:{_MONTH})\b\.?|today|tonight|tomorrow|yesterday"
    rf"|in\s+{_NUMWORD}\s+{_UNIT}|{_NUMWORD}\s+{_UNIT}\s+(?:ago|from now)"
    r"|the\s+\d{1,2}(?:st|nd|rd|th)|\d{4}-\d\d(?:-\d\d)?(?:[T ]\d\d:\d\d(?::\d\d)?)?"
    r"|\d{1,2}(?::\d\d)?\s*(?:am|pm|a\.m\.|p\.m\.)|\d{1,2}:\d\d|noon|midnight)\b",
    re.I)
# month names are only masked when capitalised (so "may" and "march" as verbs stay)
_MONTH_LOWER = re.compile(rf"^(?:{_MONTH})\.?$")
_SECRET = re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[\w-]{8,}\b")
_DIGITS = re.compile(r"\S*\d\S*")
_CAPITAL = re.compile(r"(?<=\s)[A-Z][\w'’-]*")
_PUNCT = re.compile(r"[^\w<>#\s]")
_SAME_MASK = re.compile(r"(<[vds#]>)(?:\s+\1)+")
_SENTENCE_END = re.compile(
    r"(?<!\bMr\.)(?<!\bMrs\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\be\.g\.)(?<!\bi\.e\.)(?<=[.!?])\s+")
_TRUTH_KEYS = ("subject", "value", "believer", "exception", "stale")
_WORD = re.compile(r"[\w'’-]+")
_NOT_NAMES = frozenset({"The", "A", "An", "My", "Our", "Their", "His", "Her", "It", "This",
                        "That", "In", "On", "At", "For", "To", "And", "But"})


def _truth_strings(obj: Any, key: str = "") -> Iterable[tuple[str, str]]:
    """(kind, text) for every maskable world value in a truth object: kind "d" or "v"."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "forbidden" and isinstance(v, list):
                for item in v:
                    if isinstance(item, dict) and isinstance(item.get("text"), str):
                        yield "v", item["text"]
            else:
                yield from _truth_strings(v, k)
    elif isinstance(obj, list):
        for v in obj:
            yield from _truth_strings(v, key)
    elif isinstance(obj, str):
        if key == "time_expression":
            yield "d", obj
        elif key in _TRUTH_KEYS:
            yield "v", obj
            if "(" in obj:
                yield "v", obj.split("(", 1)[0].strip()


class Masker:
    """Sentence skeletons (module docstring). Build it once over all rows of a corpus."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        vocab: dict[str, dict[str, str]] = defaultdict(dict)
        names: set[str] = set()
        for r in rows:
            for kind, text in _truth_strings(r.get("truth", {})):
                text = text.strip()
                if len(text) < 3 or text.lower() == "the user":
                    continue
                vocab[r["episode"]].setdefault(text, kind)
                if kind == "v":
                    names.update(w for w in re.findall(r"[A-Z][\w'’-]+", text)
                                 if w not in _NOT_NAMES)
        self._vocab = {ep: self._index(v) for ep, v in vocab.items()}
        self._names = frozenset(names)
        self._cache: dict[tuple[str, str], str] = {}

    @staticmethod
    def _index(vocab: dict[str, str]) -> dict[str, list[tuple[list[str], str]]]:
        """{first word: [(phrase words, mask kind)], longest phrase first} (lower case)."""
        index: dict[str, list[tuple[list[str], str]]] = defaultdict(list)
        for text, kind in sorted(vocab.items()):
            words = [w.lower() for w in _WORD.findall(text)]
            if words:
                index[words[0]].append((words, kind))
        for phrases in index.values():
            phrases.sort(key=lambda p: -len(p[0]))
        return dict(index)

    @staticmethod
    def _mask_vocab(text: str, index: dict[str, list[tuple[list[str], str]]]) -> str:
        """Replace every phrase of the index (whole words, case-insensitive, any punctuation
        between its words, a possessive 's on the last word) by its mask."""
        words = list(_WORD.finditer(text))
        low = [w.group(0).lower() for w in words]
        out, last, i = [], 0, 0
        while i < len(words):
            for phrase, kind in index.get(low[i], ()):
                n = len(phrase)
                if i + n <= len(words) and low[i:i + n - 1] == phrase[:-1] and \
                        low[i + n - 1] in (phrase[-1], phrase[-1] + "'s", phrase[-1] + "’s"):
                    out += [text[last:words[i].start()], f" <{kind}> "]
                    last = words[i + n - 1].end()
                    i += n
                    break
            else:
                i += 1
        return "".join(out) + text[last:]

    def skeleton(self, text: str, episode: str = "") -> str:
        key = (episode, text)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        s = " " + text + " "
        index = self._vocab.get(episode)
        if index:
            s = self._mask_vocab(s, index)

        def date_sub(m: re.Match) -> str:
            word = m.group(0)
            if _MONTH_LOWER.match(word) and not word[:1].isupper():
                return word
            return " <d> "

        s = _DATE_RULE.sub(date_sub, s)
        s = _SECRET.sub(" <s> ", s)
        s = _DIGITS.sub(lambda m: m.group(0) if m.group(0).startswith("<") else " <#> ", s)
        first = re.search(r"[A-Za-z]", s)
        start = first.start() if first else 0

        def cap_sub(m: re.Match) -> str:
            return " <v> " if m.start() > start or m.group(0) in self._names else m.group(0)

        s = _CAPITAL.sub(cap_sub, s)
        s = re.sub(r"\b\w[\w'’-]*\b", lambda m: " <v> " if m.group(0) in self._names
                   else m.group(0), s)
        s = _PUNCT.sub(" ", s.lower())
        s = _SAME_MASK.sub(r"\1", " ".join(s.split()))
        self._cache[key] = s
        return s


def sentences(text: str) -> list[str]:
    out = []
    for line in text.split("\n"):
        out += [p.strip() for p in _SENTENCE_END.split(line) if p.strip()]
    return out


# ------------------------------------------------------------------------ skeleton overlap

def _event_sentences(rows: list[dict[str, Any]]) -> dict[str, list[tuple[str, str, str]]]:
    """{split: [(role, episode, sentence)]} over distinct events of extract rows."""
    seen: set[tuple[str, str, str, str]] = set()
    out: dict[str, list[tuple[str, str, str]]] = {s: [] for s in SPLITS}
    for r in rows:
        if r["task"] != "extract":
            continue
        for e in r["input"]["events"]:
            key = (r["episode"], e["timestamp"], e["role"], e["text"])
            if key in seen:
                continue
            seen.add(key)
            out[r["split"]] += [(e["role"], r["episode"], s) for s in sentences(e["text"])]
    return out


def _half_cover(skeletons: list[str]) -> int:
    """How many distinct skeletons cover half of the sentences (most frequent first)."""
    if not skeletons:
        return 0
    covered, n = 0, 0
    for _, count in sorted(Counter(skeletons).items(), key=lambda kv: (-kv[1], kv[0])):
        covered += count
        n += 1
        if 2 * covered >= len(skeletons):
            break
    return n


def skeleton_overlap(rows: list[dict[str, Any]], masker: Masker | None = None) -> dict[str, Any]:
    """Share of val/test event sentences whose masked skeleton occurs in train (per role and
    overall), and the number of distinct skeletons covering half of all sentences."""
    masker = masker or Masker(rows)
    sents = _event_sentences(rows)
    skel = {s: [(role, masker.skeleton(t, ep)) for role, ep, t in sents[s]] for s in SPLITS}
    train = {k for _, k in skel["train"]}
    report: dict[str, Any] = {"sentences": {s: len(skel[s]) for s in SPLITS}}
    for s in ("val", "test"):
        items = skel[s]
        per_role = {}
        for role in ROLES:
            ks = [k for r, k in items if r == role]
            per_role[role] = round(sum(k in train for k in ks) / len(ks), 4) if ks else None
        share = round(sum(k in train for _, k in items) / len(items), 4) if items else None
        report[f"overlap_{s}"] = share
        report[f"overlap_{s}_by_role"] = per_role
    every = [k for s in SPLITS for _, k in skel[s]]
    users = [k for s in SPLITS for r, k in skel[s] if r == "user"]
    report["distinct_skeletons"] = len(set(every))
    report["skeletons_covering_half"] = _half_cover(every)
    report["skeletons_covering_half_user"] = _half_cover(users)
    report["target"] = TARGETS["skeleton_overlap_test"]
    report["pass"] = report["overlap_test"] is not None and \
        report["overlap_test"] <= TARGETS["skeleton_overlap_test"]
    return report


# ------------------------------------------------------------------------------ probes

KIND_REGEXES = (
    ("belief", r"\b(?:thinks?|believes?|reckons?|apparently|probably|might|maybe|not sure|"
               r"says|said|heard|guess|seems?|according to|confirmed|rumou?r)\b"),
    ("plan", r"\b(?:going to|gonna|plan(?:s|ning)?|will|'ll|want to|hoping to|next|tomorrow|"
             r"intend|about to|from now|in (?:a|an|one|two|three|\d+) \w+|heads up)\b"),
    ("correction", r"\b(?:actually|correction|no longer|not \w+ anymore|anymore|scratch that|"
                   r"instead|changed|cancel(?:led)?|never mind|forget|update|wrong|now|"
                   r"left|quit|stopped|gave up|pulled out|dropped|dropp\w+ out|closed)\b"),
    ("preference", r"\b(?:love|loves|likes?|prefers?|hates?|favou?rite|enjoys?|can't stand|"
                   r"rather|except|unless|fan of|into|go-to|do best|would \w+ \w+ every)\b"),
    ("relationship", r"\bmy (?:sister|brother|wife|husband|partner|friend|boss|colleague|"
                     r"coworker|roommate|neighbou?r|mum|mom|dad|mother|father|son|daughter|"
                     r"cousin|aunt|uncle|manager|client|coach|teacher|flatmate|mentor)\b"),
    ("event", r"\b(?:already|done|happened|ago|yesterday|last|went|did|had|met|saw|"
              r"booked|finished|sorted|chased)\b"),
)
_KIND_RES = tuple(re.compile(p, re.I) for _, p in KIND_REGEXES)
CORRECTION_REGEX = re.compile(KIND_REGEXES[2][1], re.I)
#: the texts a keyword probe reads for one claim: its quotes, or the whole cited events (the
#: probe reports the better of the two, since a shortcut may sit beside the quote)
VIEWS = ("quotes", "events")


def _claims(rows: list[dict[str, Any]], split: str, view: str = "quotes"
            ) -> list[tuple[str, dict[str, Any]]]:
    """(text, claim) of every gold claim of the split's extract rows; text = the quotes or the
    cited events' whole texts."""
    out = []
    for r in rows:
        if r["split"] != split or r["task"] != "extract":
            continue
        events = {e["index"]: e["text"] for e in r["input"]["events"]}
        for c in r["gold"]["claims"]:
            text = " ".join(c["quotes"]) if view == "quotes" else \
                " ".join(events.get(i, "") for i in dict.fromkeys(c["source_indices"]))
            out.append((text, c))
    return out


def _result(figure: float | None, target: float, **extra: Any) -> dict[str, Any]:
    return {"figure": None if figure is None else round(figure, 4), "target": round(target, 4),
            "pass": figure is not None and figure <= target, **extra}


def _learn(pairs: Iterable[tuple[Any, Any]]) -> tuple[dict[Any, Any], Any]:
    """{feature: most frequent label} and the overall most frequent label (ties: smallest)."""
    by: dict[Any, Counter] = defaultdict(Counter)
    total: Counter = Counter()
    for f, y in pairs:
        by[f][y] += 1
        total[y] += 1

    def top(c: Counter) -> Any:
        return min(c.items(), key=lambda kv: (-kv[1], str(kv[0])))[0] if c else None

    return {f: top(c) for f, c in by.items()}, top(total)


def _best_view(probe, rows: list[dict[str, Any]]) -> dict[str, Any]:
    results = [{**probe(rows, v), "view": v} for v in VIEWS]
    return max(results, key=lambda r: (-1 if r["figure"] is None else r["figure"]))


def _keyword_kind(rows: list[dict[str, Any]], view: str) -> dict[str, Any]:
    def sig(text: str) -> tuple[bool, ...]:
        return tuple(bool(r.search(text)) for r in _KIND_RES)

    table, default = _learn((sig(t), c["kind"]) for t, c in _claims(rows, "train", view))
    test = _claims(rows, "test", view)
    right = sum(table.get(sig(t), default) == c["kind"] for t, c in test)
    majority = Counter(c["kind"] for _, c in test).most_common(1)
    return _result(right / len(test) if test else None, TARGETS["keyword_kind"],
                   claims=len(test), signatures=len(table),
                   majority_share=round(majority[0][1] / len(test), 4) if test else None)


def keyword_kind(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return _best_view(_keyword_kind, rows)


def _correction_regex(rows: list[dict[str, Any]], view: str) -> dict[str, Any]:
    table, default = _learn((bool(CORRECTION_REGEX.search(t)), c["is_correction"])
                            for t, c in _claims(rows, "train", view))
    test = _claims(rows, "test", view)
    if not test:
        return _result(None, TARGETS["correction_regex"], claims=0)
    pred = [table.get(bool(CORRECTION_REGEX.search(t)), default) for t, _ in test]
    gold = [c["is_correction"] for _, c in test]
    recalls = []
    for cls in (True, False):
        idx = [i for i, g in enumerate(gold) if g is cls]
        if idx:
            recalls.append(sum(pred[i] is cls for i in idx) / len(idx))
    accuracy = sum(p == g for p, g in zip(pred, gold, strict=True)) / len(test)
    majority = max(sum(gold), len(gold) - sum(gold)) / len(gold)
    return _result(sum(recalls) / len(recalls), TARGETS["correction_regex"], claims=len(test),
                   corrections=sum(gold), accuracy=round(accuracy, 4),
                   majority_share=round(majority, 4))


def correction_regex(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return _best_view(_correction_regex, rows)


def _span_items(rows: list[dict[str, Any]], split: str, masker: Masker
                ) -> list[tuple[str, bool]]:
    """(skeleton, quoted by a gold claim) for every candidate span of the split's user and tool
    events in extract rows."""
    out = []
    for r in rows:
        if r["split"] != split or r["task"] != "extract":
            continue
        quoted = {(i, q) for c in r["gold"]["claims"]
                  for i, q in zip(c["source_indices"], c["quotes"], strict=True)}
        for e in r["input"]["events"]:
            if e["role"] not in ("user", "tool"):
                continue
            for span in candidate_spans(e["text"]):
                hit = (e["index"], span) in quoted
                out.append((masker.skeleton(span, r["episode"]), hit))
    return out


def skeleton_lookup(rows: list[dict[str, Any]], masker: Masker | None = None) -> dict[str, Any]:
    masker = masker or Masker(rows)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for k, hit in _span_items(rows, "train", masker):
        counts[k][0] += hit
        counts[k][1] += 1
    quoted = {k for k, (q, n) in counts.items() if 2 * q >= n and q > 0}
    test = _span_items(rows, "test", masker)
    predicted = [hit for k, hit in test if k in quoted]
    gold = sum(hit for _, hit in test)
    recall = sum(predicted) / gold if gold else None
    precision = sum(predicted) / len(predicted) if predicted else 0.0
    return _result(recall, TARGETS["skeleton_lookup_recall"], precision=round(precision, 4),
                   gold_quotes=gold, spans=len(test), quoted_skeletons=len(quoted))


def _evidence_features(row: dict[str, Any]) -> list[tuple[tuple[Any, ...], ...]]:
    """Per evidence item: descriptions from fine to coarse (timestamps, positions, ids only)."""
    inp = row["input"]
    ev = inp["evidence"]
    asked = parse_timestamp(inp["asked_at"])
    stamps = [parse_timestamp(e["timestamp"]) for e in ev]
    order = sorted(range(len(ev)), key=lambda i: (stamps[i], i), reverse=True)
    rank = {i: n for n, i in enumerate(order)}
    out = []
    for i, (e, t) in enumerate(zip(ev, stamps, strict=True)):
        clock = "noon" if (t.hour, t.minute, t.second) == (12, 0, 0) else \
            "round" if (t.minute, t.second) == (0, 0) else "other"
        age = (asked - t).total_seconds() / 86400
        age_b = 0 if age < 1 else 1 if age < 2 else 2 if age < 8 else 3 if age < 31 else 4
        idn = re.sub(r"\D", "", e["id"]) or "0"
        dup = sum(1 for s in stamps if s == t) > 1
        fine = (i, len(ev) - 1 - i, int(idn), clock, min(rank[i], 3), age_b, dup, len(ev))
        mid = (clock, min(rank[i], 3), age_b, dup)
        coarse = (clock, rank[i] == 0)
        out.append((fine, mid, coarse))
    return out


def _outcome(row: dict[str, Any]) -> tuple[str, ...]:
    g = row["gold"]
    return ("abstain",) if g["insufficient_evidence"] else tuple(sorted(g["citations"]))


def reflect_timestamp(rows: list[dict[str, Any]]) -> dict[str, Any]:
    tables: list[dict[Any, list[int]]] = [defaultdict(lambda: [0, 0]) for _ in range(3)]
    prior = [0, 0]
    train = [r for r in rows if r["split"] == "train" and r["task"] == "reflect"]
    for r in train:
        cited = set(r["gold"]["citations"])
        for e, feats in zip(r["input"]["evidence"], _evidence_features(r), strict=True):
            for table, f in zip(tables, feats, strict=True):
                table[f][0] += e["id"] in cited
                table[f][1] += 1
            prior[0] += e["id"] in cited
            prior[1] += 1

    def p_cited(feats: tuple[tuple[Any, ...], ...]) -> float:
        for table, f in zip(tables, feats, strict=True):
            if f in table and table[f][1] >= 3:
                return table[f][0] / table[f][1]
        return prior[0] / prior[1] if prior[1] else 0.0

    test = [r for r in rows if r["split"] == "test" and r["task"] == "reflect"]
    if not test:
        return _result(None, TARGETS["reflect_timestamp_margin"], rows=0)
    right = abstain_right = item_right = items = items_cited = 0
    cite_right = cite_chance = answerable = 0.0
    for r in test:
        ev = r["input"]["evidence"]
        probs = [p_cited(f) for f in _evidence_features(r)]
        pred = tuple(sorted(e["id"] for e, p in zip(ev, probs, strict=True) if p >= 0.5))
        pred_outcome = pred or ("abstain",)
        right += pred_outcome == _outcome(r)
        abstain_right += (pred_outcome == ("abstain",)) == r["gold"]["insufficient_evidence"]
        cited = set(r["gold"]["citations"])
        for e in ev:
            items += 1
            items_cited += e["id"] in cited
            item_right += (e["id"] in pred) == (e["id"] in cited)
        if not r["gold"]["insufficient_evidence"] and ev:
            answerable += 1
            forced = pred or (ev[max(range(len(ev)), key=lambda i: (probs[i], -i))]["id"],)
            cite_right += set(forced) == cited
            cite_chance += (1 / len(ev)) if len(cited) == 1 else 0.0
    train_majority = Counter(_outcome(r) for r in train).most_common(1)
    majority_outcome = train_majority[0][0] if train_majority else ("abstain",)
    majority_share = sum(_outcome(r) == majority_outcome for r in test) / len(test)
    abstain_share = sum(r["gold"]["insufficient_evidence"] for r in test) / len(test)
    target = majority_share + TARGETS["reflect_timestamp_margin"]
    citation = cite_right / answerable if answerable else None
    chance = cite_chance / answerable if answerable else None
    result = _result(right / len(test), target, rows=len(test),
                     majority_outcome=list(majority_outcome),
                     majority_share=round(majority_share, 4),
                     abstention_accuracy=round(abstain_right / len(test), 4),
                     abstention_majority=round(max(abstain_share, 1 - abstain_share), 4),
                     citation_item_accuracy=round(item_right / items, 4) if items else None,
                     citation_item_majority=round(max(items_cited, items - items_cited) / items,
                                                  4) if items else None,
                     citation_on_answerable=None if citation is None else round(citation, 4),
                     citation_chance=None if chance is None else round(chance, 4))
    if citation is not None and chance is not None:
        result["pass"] = result["pass"] and \
            citation <= chance + TARGETS["reflect_timestamp_margin"]
    return result


def _fact_keys(row: dict[str, Any], masker: Masker) -> dict[str, str]:
    predicates = {}
    for t in row.get("truth", {}).get("facts", []) or []:
        if isinstance(t, dict) and t.get("fact_id") and t.get("predicate"):
            predicates[t["fact_id"]] = "p:" + t["predicate"]
    return {f["id"]: predicates.get(f["id"]) or "s:" + masker.skeleton(f["statement"],
                                                                      row["episode"])
            for f in row["input"]["facts"]}


def _gold_observations(row: dict[str, Any], masker: Masker) -> set[tuple[tuple[str, ...], str]]:
    return {(tuple(sorted(o["supports"])), masker.skeleton(o["statement"], row["episode"]))
            for o in row["gold"]["observations"]}


def pair_table(rows: list[dict[str, Any]], masker: Masker | None = None) -> dict[str, Any]:
    masker = masker or Masker(rows)
    table: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for r in rows:
        if r["split"] != "train" or r["task"] != "consolidate":
            continue
        keys = _fact_keys(r, masker)
        for supports, skel in _gold_observations(r, masker):
            if len(supports) == 2 and all(s in keys for s in supports):
                table[tuple(sorted(keys[s] for s in supports))][skel] += 1
    best = {k: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for k, c in table.items()}
    test = [r for r in rows if r["split"] == "test" and r["task"] == "consolidate"]
    if not test:
        return _result(None, TARGETS["pair_table"], rows=0)
    right = right_obs = with_obs = 0
    for r in test:
        keys = _fact_keys(r, masker)
        ids = sorted(keys)
        pred = set()
        for n, a in enumerate(ids):
            for b in ids[n + 1:]:
                k = tuple(sorted((keys[a], keys[b])))
                if k in best:
                    pred.add(((a, b), best[k]))
        gold = _gold_observations(r, masker)
        right += pred == gold
        if gold:
            with_obs += 1
            right_obs += pred == gold
    return _result(right / len(test), TARGETS["pair_table"], rows=len(test), pairs=len(best),
                   rows_with_observation=with_obs,
                   accuracy_on_rows_with_observation=round(right_obs / with_obs, 4)
                   if with_obs else None)


def transfer_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The manifest's `transfer` section: skeleton overlap and every probe."""
    masker = Masker(rows)
    probes = {
        "keyword_kind": keyword_kind(rows),
        "correction_regex": correction_regex(rows),
        "skeleton_lookup": skeleton_lookup(rows, masker),
        "reflect_timestamp": reflect_timestamp(rows),
        "pair_table": pair_table(rows, masker),
    }
    overlap = skeleton_overlap(rows, masker)
    return {"skeleton_overlap": overlap, "probes": probes,
            "all_pass": bool(overlap["pass"]) and all(p["pass"] for p in probes.values()),
            "method": "memworker.corpus.probes (module docstring): trained on train, scored "
                      "on test; pass = figure <= target"}


def table(report: dict[str, Any]) -> str:
    """A printable table of a transfer report."""
    o = report["skeleton_overlap"]
    lines = [("skeleton overlap test (val)", f"{o['overlap_test']} ({o['overlap_val']}) "
              f"target <= {o['target']} {'PASS' if o['pass'] else 'FAIL'}"),
             ("skeletons covering half (user)", f"{o['skeletons_covering_half']} "
              f"({o['skeletons_covering_half_user']}) of {o['distinct_skeletons']}")]
    for name, p in report["probes"].items():
        extra = ", ".join(f"{k} {v}" for k, v in p.items() if k not in ("figure", "target", "pass"))
        lines.append((name, f"{p['figure']} target <= {p['target']} "
                            f"{'PASS' if p['pass'] else 'FAIL'} ({extra})"))
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in lines)
