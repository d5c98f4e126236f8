"""One episode: sample a world state from a family, render it to events, derive three rows.

`make_episode` picks behaviours, builds their units (memworker.corpus.behaviours), adds background
facts and a consolidation pair, lays the fragments out as timestamped events with small talk, tool
noise and a few typos, and returns the extract, consolidate and reflect rows. Gold answers come
from the units' structured claims; the rendered text is only consulted to know which event a
fragment landed in and what its (possibly typo'd) sentence reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from memworker.corpus import behaviours
from memworker.corpus.world import (
    DAY_SPAN,
    FIRST_DAY,
    USER,
    Ctx,
    Family,
    Person,
    iso,
    rng_for,
    session_start,
    typo,
)

P_EMPTY = 0.15  # share of episodes where nothing durable is said
P_INSUFFICIENT = 0.37  # share of reflect rows whose evidence cannot answer
P_OBSERVATION = 0.75  # share of consolidate rows with a supported observation
MAX_EVIDENCE = 10
MAX_CLAIMS = 3
#: rough token estimate used to keep extract rows under the 1,024-token limit while laying out
#: (the build counts real tokens and excludes whatever still exceeds it)
TOKEN_BUDGET = 950
BASE_TOKENS = 420  # system prompt + extract template + chat markup


_DENSE = re.compile(r"\S*[\d_][\S]*")
#: claims' weight against MAX_CLAIMS: behaviours with two claims or two quoted events weigh more
CLAIM_WEIGHT = {"plan_vs_done": 2.0, "same_name": 2.0, "coreference": 1.5, "multi_source": 1.5,
                "tool_confirmed": 2.0}
_GOLDEN = 0.6180339887498949  # Weyl sequences: shares hold in every split, not just on average
_SQRT2 = 0.4142135623730951


def scheduled(slot: int, step: float, share: float) -> bool:
    """True for about `share` of consecutive slots, evenly spread (low-discrepancy)."""
    return (slot * step + 0.5) % 1.0 < share


def est_tokens(text: str, overhead: int = 22) -> int:
    """Pessimistic token estimate of one prompt line (timestamps, ids and random strings such
    as fake keys tokenise densely)."""
    dense = sum(len(m.group(0)) for m in _DENSE.finditer(text))
    return overhead + len(text) * 10 // 29 + dense * 2 // 5


def est_claim_tokens(c: behaviours.Claim) -> int:
    size = len(c.statement) + len(c.subject) + len(c.value or "") + 190
    size += sum(len(f.sents[i]) + 20 for f, i in c.sources)
    return size * 10 // 28
_ACKS = ("Got it.", "Noted, thanks.", "Thanks for letting me know.", "Okay!", "Sounds good.",
         "Understood.", "Thanks for the update.", "Makes sense.")
_USER_FILLER = ("Hey!", "Morning.", "Quick one.", "Anyway.", "Thanks!", "Ok, cool.",
                "Hope you're well.", "Hi again.", "Right.", "So.")
_HELLO_REPLY = ("Hi! What's up?", "Hello! How can I help?", "Hey, good to hear from you.")


def _weights(domain_key: str) -> dict[str, float]:
    w = {b: 1.0 for b in behaviours.EXTRACT_BEHAVIOURS if b not in behaviours.CODING_ONLY}
    if domain_key == "coding":
        w["tool_confirmed"] = 1.6
    return w


def _choose(rng, weights: dict[str, float], k: int) -> list[str]:
    names = sorted(weights)
    picked: list[str] = []
    for _ in range(k):
        pool = [n for n in names if n not in picked]
        total = sum(weights[n] for n in pool)
        r = rng.random() * total
        for n in pool:
            r -= weights[n]
            if r <= 0:
                picked.append(n)
                break
        else:
            picked.append(pool[-1])
    return picked


def _build(ctx: Ctx, name: str, session: int, claimless: bool) -> behaviours.Unit | None:
    builder = behaviours.CLAIMLESS[name] if claimless else behaviours.BUILDERS[name]
    for _ in range(4):
        try:
            return builder(ctx, session)
        except LookupError:
            continue
    return None


# ------------------------------------------------------------------------------ background

def _background(ctx: Ctx, n: int) -> list[tuple[behaviours.Existing, behaviours.Question]]:
    """Unrelated true facts the store holds (consolidate distractors, reflect evidence), each
    with a question it answers."""
    out = []
    for _ in range(n * 3):
        if len(out) >= n:
            break
        attrs = [a for a in ctx.attrs() if a.subject in ("person", "pet", "project", "user")]
        if not attrs:
            break
        attr = ctx.rng.choice(attrs)
        try:
            person = ctx.subject_for(attr)
            (value,) = ctx.value(attr.pool)
        except LookupError:
            continue
        fact = behaviours._existing(ctx, attr, person, value)
        name = "the user" if person is USER else person.canon
        out.append((fact, behaviours.Question(attr.ask.format_map({"N": name}), fact.statement,
                                     [fact.key], "", fact.subject, attr.pred, value)))
    return out


def _pair(ctx: Ctx) -> tuple[list[behaviours.Existing], str, str] | None:
    pairs = list(ctx.domain.pairs)
    ctx.rng.shuffle(pairs)
    for pair in pairs:
        if pair.subject == "user":
            person = USER
        else:
            cands = [p for p in ctx.family.cast if p.kind == pair.subject]
            if not cands:
                continue
            person = ctx.rng.choice(cands)
        name = "The user" if person is USER else person.canon
        facts = []
        for text, pred in ((pair.a, "pair_a"), (pair.b, "pair_b")):
            facts.append(behaviours.Existing(ctx.key("X"), text.format_map({"N": name}),
                                    ctx.valid_from(), person.canon, pred, None))
        return facts, pair.obs.format_map({"N": name}), person.canon
    return None


# ---------------------------------------------------------------------------------- layout

class _Layout:
    def __init__(self, ctx: Ctx, offset: str, budget: int):
        self.ctx, self.offset = ctx, offset
        self.events: list[dict[str, Any]] = []
        self.clock: datetime | None = None
        self.left = budget  # estimated tokens left for events

    def room(self, text: str, reserve: int) -> bool:
        """Whether an optional piece of text still fits, keeping `reserve` for what must come."""
        return est_tokens(text, 0) + 22 <= self.left - reserve

    def emit(self, role: str, text: str, trusted: bool = True, gap: tuple[int, int] = (1, 6)):
        assert self.clock is not None
        self.left -= est_tokens(text)
        self.clock += timedelta(minutes=self.ctx.rng.randrange(*gap),
                                seconds=self.ctx.rng.randrange(60))
        self.events.append({"index": len(self.events), "role": role,
                            "timestamp": iso(self.clock, self.offset), "text": text,
                            "trusted": trusted})

    def filler(self, reserve: int, required: bool = False) -> None:
        """One optional event (an acknowledgement, a chit-chat exchange or tool noise); when
        `required` (an event must separate two fragments) the shortest one if nothing fits."""
        r = self.ctx.rng.random()
        dom = self.ctx.domain
        ack = self.ctx.rng.choice(_ACKS)
        if (r < 0.45 or not dom.chitchat) and not (
                self.events and self.events[-1]["role"] == "assistant"):
            if required or self.room(ack, reserve):
                self.emit("assistant", ack, gap=(0, 2))
        elif r < 0.8 and dom.chitchat:
            q, a = self.ctx.rng.choice(dom.chitchat)
            if self.room(q + a + " " * 80, reserve):
                self.emit("user", q)
                self.emit("assistant", a, gap=(0, 2))
            elif required:
                self.emit("assistant", ack, gap=(0, 2))
        else:
            tool = self.ctx.rng.choice(dom.tools)
            lines = [behaviours.noise_line(self.ctx, tool)
                     for _ in range(self.ctx.rng.randrange(1, 4))]
            if self.room("\n".join(lines), reserve):
                self.emit("tool", "\n".join(lines), trusted=False, gap=(0, 3))
            elif required:
                self.emit("assistant", ack, gap=(0, 2))


def _frag_text(frag: behaviours.Frag) -> str:
    return "\n".join(frag.sents) if frag.lines else " ".join(frag.sents)


def _layout(ctx: Ctx, units: list[behaviours.Unit], n_sessions: int, budget: int
            ) -> list[dict[str, Any]]:
    fam, rng = ctx.family, ctx.rng
    lay = _Layout(ctx, fam.offset, budget)
    smalltalk = tuple(ctx.domain.smalltalk) + _USER_FILLER
    frags = [f for u in units for f in u.frags]
    # what must still be laid out: every fragment, and one event before each gap_before one
    reserve = sum(est_tokens(_frag_text(f)) + (24 if f.gap_before else 0) for f in frags)
    for s in range(n_sessions):
        lay.clock = session_start(ctx.days[s], rng)
        hello = rng.choice(smalltalk)
        if rng.random() < fam.chatty and lay.room(hello, reserve):
            lay.emit("user", hello)
            reply = rng.choice(_HELLO_REPLY)
            if rng.random() < 0.6 and lay.room(reply, reserve):
                lay.emit("assistant", reply, gap=(0, 2))
        for unit in [u for u in units if u.frags[0].session == s]:
            for i, frag in enumerate(unit.frags):
                reserve -= est_tokens(_frag_text(frag)) + (24 if frag.gap_before else 0)
                if frag.gap_before:
                    lay.filler(reserve + est_tokens(_frag_text(frag)), required=True)
                lead = 0
                if frag.fill and frag.role == "user":
                    extra = rng.choice(smalltalk)
                    if rng.random() < fam.chatty * 0.6 and lay.room(extra * 2, reserve):
                        frag.sents.insert(0, extra)
                        lead = 1
                    extra = rng.choice(smalltalk)
                    if rng.random() < fam.chatty * 0.4 and lay.room(extra * 2, reserve):
                        frag.sents.append(extra)
                    if frag.trusted and rng.random() < fam.typo_rate:
                        k = rng.randrange(len(frag.sents))
                        frag.sents[k] = typo(frag.sents[k], rng, frag.protect)
                frag.lead = lead
                frag.event = len(lay.events)
                lay.emit(frag.role, _frag_text(frag), frag.trusted)
                nxt = unit.frags[i + 1] if i + 1 < len(unit.frags) else None
                ack = rng.choice(_ACKS)
                if (frag.role == "user" and frag.trusted and (nxt is None or nxt.role == "user")
                        and not (nxt is not None and nxt.gap_before) and rng.random() < 0.5
                        and lay.room(ack, reserve)):
                    lay.emit("assistant", ack, gap=(0, 2))
            if rng.random() < 0.1:
                lay.filler(reserve)
        if rng.random() < fam.chatty * 0.4:
            lay.filler(reserve)
    return lay.events


# ------------------------------------------------------------------------------------ rows

def _quote(frag: behaviours.Frag, idx: int) -> str:
    return frag.sents[frag.lead + idx]


def _claim_doc(c: behaviours.Claim, ids: dict[str, str]) -> dict[str, Any]:
    return {
        "source_indices": [f.event for f, _ in c.sources],
        "quotes": [_quote(f, i) for f, i in c.sources],
        "subject": {"name": c.subject, "type": c.subject_type},
        "predicate": c.predicate,
        "value": c.value,
        "statement": c.statement,
        "kind": c.kind,
        "time_expression": c.when.words if c.when else None,
        "date": c.when.date if c.when else None,
        "date_precision": c.when.precision if c.when else None,
        "is_correction": c.correction,
        "supersedes": [ids[k] for k in c.supersedes],
        "confidence": c.confidence,
    }


def _ordered_behaviours(names) -> list[str]:
    present = set(names)
    return [b for b in behaviours.BEHAVIOURS if b in present]


def _noon(day: str, offset: str) -> str:
    return f"{day}T12:00:00{offset}"


@dataclass
class _Episode:
    """What one episode's three rows are built from (in generation order)."""

    ctx: Ctx
    episode_id: str
    slot: int
    base: dict[str, Any]  # the fields every row of the episode shares
    units: list[behaviours.Unit]
    claims: list[behaviours.Claim]  # in order of their first source event
    existing: list[behaviours.Existing]  # facts the store holds (extract input)
    background: list[behaviours.Existing]
    background_qs: list[tuple[behaviours.Existing, Any]]
    pair: Any  # (facts, observation, subject) of a supported observation, or None
    events: list[dict[str, Any]]


def make_episode(family: Family, episode_id: str, seed: int, slot: int = 0
                 ) -> list[dict[str, Any]]:
    """The rows (extract, consolidate, reflect) of one episode of `family`. `slot` (the
    episode's number within its domain) spreads empty extractions and insufficient
    reflections evenly. The random draws happen in a fixed order (the same seed gives the same
    bytes): units, background, observation pair, stored facts, layout, then each row."""
    rng = rng_for("episode", seed, episode_id)
    day0 = FIRST_DAY + timedelta(days=rng.randrange(DAY_SPAN))
    two_sessions = rng.random() < 0.3
    days: list[date] = [day0, day0 + timedelta(days=rng.randrange(1, 15))]
    ctx = Ctx(rng, family, days)
    units, n_sessions = _plan_units(ctx, scheduled(slot, _GOLDEN, P_EMPTY), two_sessions)
    background_qs = _background(ctx, rng.randrange(2, 5))
    background = [fact for fact, _ in background_qs]
    pair = _pair(ctx) if rng.random() < P_OBSERVATION else None

    existing = [x for u in units for x in u.existing] + background[: rng.randrange(0, 3)]
    rng.shuffle(existing)
    budget = (TOKEN_BUDGET - BASE_TOKENS - sum(est_claim_tokens(c) for u in units
                                                 for c in u.claims)
              - sum(est_tokens(x.statement, 10) for x in existing))
    claims = [c for u in units for c in u.claims]
    claims = [c for _, _, c in sorted((min(f.event for f, _ in c.sources), i, c)
                                      for i, c in enumerate(claims))]
    episode = _Episode(
        ctx=ctx, episode_id=episode_id, slot=slot,
        base={"split": family.split, "domain": family.domain.key, "family": family.id,
              "episode": episode_id},
        units=units, claims=claims, existing=existing, background=background,
        background_qs=background_qs, pair=pair, events=_layout(ctx, units, n_sessions, budget))
    extract_row = _extract_row(episode)
    consolidate_row = _consolidate_row(episode)
    reflect_row = _reflect_row(episode, extract_row["truth"]["facts"])
    return [extract_row, consolidate_row, reflect_row]


def _plan_units(ctx: Ctx, empty: bool, two_sessions: bool
                ) -> tuple[list[behaviours.Unit], int]:
    """(behaviour units of the episode, number of sessions). An empty episode gets claimless
    units (or chit-chat); otherwise at least one unit carries a claim."""
    rng, domain = ctx.rng, ctx.family.domain
    units: list[behaviours.Unit] = []
    if empty:
        names = _choose(rng, {k: 1.0 for k in behaviours.CLAIMLESS}, rng.choice((0, 1, 1, 2)))
    else:
        names = _choose(rng, _weights(domain.key), rng.choices((1, 2, 3), (0.3, 0.45, 0.25))[0])
    while sum(CLAIM_WEIGHT.get(n, 1.0) for n in names) > MAX_CLAIMS:
        names.pop()
    n_sessions = 2 if two_sessions and len(names) >= 2 else 1
    for i, name in enumerate(names):
        session = 0 if n_sessions == 1 or i < (len(names) + 1) // 2 else 1
        unit = _build(ctx, name, session, claimless=empty)
        if unit is not None:
            units.append(unit)
    if not empty and not any(u.claims for u in units):
        for name in ("new_detail", "relative_date", "preference_exception"):
            unit = _build(ctx, name, 0, claimless=False)
            if unit is not None and unit.claims:
                units.append(unit)
                break
    if empty and rng.random() < 0.5 and domain.chitchat:
        q, a = rng.choice(domain.chitchat)
        units.append(behaviours.Unit("", [behaviours.Frag("user", [q], session=0),
                                          behaviours.Frag("assistant", [a], session=0,
                                                          fill=False)]))
    if not units:
        units.append(behaviours.Unit("", [behaviours.Frag("user", [rng.choice(domain.smalltalk)],
                                                          session=0)]))
    return units, n_sessions


def _extract_row(ep: _Episode) -> dict[str, Any]:
    """The extract row: the events and stored facts in, the claims out, the world state's facts
    (current, noted, stored) as truth."""
    ids = {x.key: f"F{i + 1}" for i, x in enumerate(ep.existing)}
    gold_claims = [_claim_doc(c, ids) for c in ep.claims]
    facts_truth = []
    for c, doc in zip(ep.claims, gold_claims, strict=True):
        entry = {"status": "current", "required": True, "behaviour": c.behaviour, **{
            k: doc[k] for k in ("predicate", "value", "statement", "kind", "time_expression",
                                "date", "date_precision", "is_correction", "supersedes",
                                "source_indices", "quotes", "confidence")}, "subject": c.subject,
            "subject_type": c.subject_type}
        if c.believer:
            entry["believer"] = c.believer
        if c.exception:
            entry["exception"] = c.exception
        facts_truth.append(entry)
    for u in ep.units:
        for note in u.notes:
            facts_truth.append({**note, "required": False})
    for x in ep.existing:
        facts_truth.append({"status": x.status if x.status != "current" else "stored",
                            "required": False, "fact_id": ids[x.key], "subject": x.subject,
                            "predicate": x.predicate, "value": x.value})
    extract_behaviours = [u.behaviour for u in ep.units if u.behaviour]
    if any(c.when for c in ep.claims):
        extract_behaviours.append("relative_date")
    return {
        **ep.base, "id": f"{ep.episode_id}-extract", "task": "extract",
        "behaviours": _ordered_behaviours(extract_behaviours),
        "input": {"episode_id": ep.episode_id, "events": ep.events,
                  "existing_facts": [{"id": ids[x.key], "statement": x.statement,
                                      "valid_from": x.valid_from} for x in ep.existing]},
        "gold": {"claims": gold_claims},
        "truth": {"facts": facts_truth,
                  "forbidden": [{"reason": r, "text": t} for u in ep.units
                                for r, t in u.forbidden],
                  "empty": not gold_claims},
    }


def _consolidate_row(ep: _Episode) -> dict[str, Any]:
    """The consolidate row: stored, new and paired facts in; the supported observation (if the
    episode has a pair) out."""
    stored = [x for x in ep.existing if x.status == "current"] + [
        x for x in ep.background if x not in ep.existing]
    pool_facts: list[tuple[str, str]] = [(x.key, x.statement) for x in stored]
    pool_facts += [(c.key, c.statement) for c in ep.claims
                   if c.kind not in ("retraction", "belief")]
    if ep.pair is not None:
        pool_facts += [(x.key, x.statement) for x in ep.pair[0]]
    ep.ctx.rng.shuffle(pool_facts)
    cids = {k: f"F{i + 1}" for i, (k, _) in enumerate(pool_facts)}
    observations, cons_truth = [], []
    if ep.pair is not None:
        supports = sorted((cids[x.key] for x in ep.pair[0]), key=lambda s: int(s[1:]))
        observations.append({"statement": ep.pair[1], "supports": supports})
        cons_truth.append({"supports": supports, "subject": ep.pair[2], "statement": ep.pair[1]})
    return {
        **ep.base, "id": f"{ep.episode_id}-consolidate", "task": "consolidate",
        "behaviours": ["consolidation"] if observations else [],
        "input": {"facts": [{"id": cids[k], "statement": s} for k, s in pool_facts]},
        "gold": {"observations": observations},
        "truth": {"observations": cons_truth},
    }


def _evidence_items(ep: _Episode, ts_offset: str) -> dict[str, tuple[str, str]]:
    """{key: (timestamp, text)} of everything a reflect row may show as evidence."""
    items: dict[str, tuple[str, str]] = {}
    for x in ep.existing + ep.background:
        items[x.key] = (_noon(x.valid_from, ts_offset), x.statement)
    for c in ep.claims:
        ev = ep.events[max(f.event for f, _ in c.sources)]
        items[c.key] = (ev["timestamp"], c.evidence_text())
    for key, text, frag in (e for u in ep.units for e in u.evidence):
        items[key] = (ep.events[frag.event]["timestamp"], text[:600])
    return items


def _reflect_row(ep: _Episode, facts_truth: list[dict[str, Any]]) -> dict[str, Any]:
    """The reflect row: a question about the episode (or one no evidence answers), the evidence
    that answers it plus any injected text and distractors, the cited ids as gold."""
    rng, offset = ep.ctx.rng, ep.ctx.family.offset
    last = datetime.fromisoformat(ep.events[-1]["timestamp"].replace("Z", "+00:00"))
    asked = last + timedelta(days=rng.randrange(0, 4), minutes=rng.randrange(5, 600))
    asked_at = asked.strftime("%Y-%m-%dT%H:%M:%S") + offset
    items = _evidence_items(ep, "+00:00" if offset == "Z" else offset)
    questions = [q for u in ep.units for q in u.questions]
    known = {(t["subject"], t["predicate"]) for t in facts_truth} | {
        (x.subject, x.predicate) for x in ep.background}
    insufficient = scheduled(ep.slot, _SQRT2, P_INSUFFICIENT)
    if not questions:  # nothing asked about this episode's events: ask about a stored fact
        questions = [q for _, q in ep.background_qs]
    question = rng.choice(questions) if questions and not insufficient else None
    refl_behaviours: list[str] = []
    if question is None:
        insufficient = True
        q_text, answer, missing = _unanswerable(ep.ctx, known, ep.claims, ep.background)
        required: list[str] = []
        r_truth = {"answerable": False, **missing, "stale": [], "expected_answer": answer}
        refl_behaviours.append("insufficient_evidence")
    else:
        q_text, answer = question.text, question.answer
        required = list(question.support)
        for x in ep.existing:  # the superseded/retracted fact is part of the picture
            if (x.status != "current" and x.subject == question.subject
                    and x.predicate == question.predicate):
                required.append(x.key)
        r_truth = {"answerable": True, "subject": question.subject,
                   "predicate": question.predicate, "value": question.value,
                   "stale": question.stale, "expected_answer": answer}
        if question.behaviour:
            refl_behaviours.append(question.behaviour)
    chosen = [k for k in required if k in items]
    others = [k for k in items if k not in chosen]
    rng.shuffle(others)
    inj_keys = [k for u in ep.units for k, _, _ in u.evidence]
    chosen += [k for k in others if k in inj_keys]
    chosen += [k for k in others if k not in inj_keys][: max(0, MAX_EVIDENCE - len(chosen))]
    rng.shuffle(chosen)
    eids = {k: f"E{i + 1}" for i, k in enumerate(chosen)}
    if any(k in eids for k in inj_keys):
        refl_behaviours.append("injection")
    citations = [] if insufficient else sorted(
        (eids[k] for k in question.support), key=lambda s: int(s[1:]))
    r_truth["gold_citations"] = citations
    r_truth["injected_evidence"] = [eids[k] for k in inj_keys if k in eids]
    r_truth["forbidden"] = [{"reason": r, "text": t} for u in ep.units for r, t in u.forbidden]
    return {
        **ep.base, "id": f"{ep.episode_id}-reflect", "task": "reflect",
        "behaviours": _ordered_behaviours(refl_behaviours),
        "input": {"question": q_text, "asked_at": asked_at,
                  "evidence": [{"id": eids[k], "timestamp": items[k][0], "text": items[k][1]}
                               for k in chosen]},
        "gold": {"answer": answer, "citations": citations, "insufficient_evidence": insufficient},
        "truth": r_truth,
    }


def _unanswerable(ctx: Ctx, known: set[tuple[str, str]], claims: list[behaviours.Claim],
                  background: list[behaviours.Existing]) -> tuple[str, str, dict[str, Any]]:
    """A question about a subject of this episode whose answer no evidence holds."""
    mentioned = {c.subject for c in claims} | {x.subject for x in background}
    people: list[Person] = [USER] + [p for p in ctx.family.cast if p.canon in mentioned]
    people += [p for p in ctx.family.cast if p.canon not in mentioned]
    for person in people:
        kind = "user" if person is USER else person.kind
        attrs = [a for a in ctx.domain.attrs if a.subject == kind
                 and (person.canon, a.pred) not in known]
        if attrs:
            attr = ctx.rng.choice(attrs)
            name = "the user" if person is USER else person.canon
            short = "the user's" if person is USER else f"{person.name}'s"
            answer = f"The evidence does not mention {short} {attr.topic}."
            return (attr.ask.format_map({"N": name}), answer[0].upper() + answer[1:],
                    {"subject": person.canon, "predicate": attr.pred, "missing": attr.topic})
    raise LookupError("no unanswerable question left")  # pragma: no cover - domains are large

