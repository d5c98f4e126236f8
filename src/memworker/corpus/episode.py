"""One episode: sample a world state from a family, render it as a conversation, derive three rows.

An episode is a conversation of 2-4 sessions over days or weeks. `make_episode` picks behaviours
(memworker.corpus.behaviours), an episodic event told in passing, hard negatives and chatter,
spreads them over the sessions, and lays them out as timestamped turns: the user's turns often
carry several topics (fragments of different units merged into one turn, with small stories
around them), and the assistant answers what it was just told (replies drawn from the units'
content). The store holds background facts with realistic times; the consolidate row combines
facts about one subject (or rightly combines nothing); the reflect row asks about the episode.
Gold answers come from the units' structured claims; the rendered text is consulted only to know
which event a fragment landed in. Every surface string comes from memworker.corpus.templates,
split by the family's split.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from memworker.corpus import behaviours
from memworker.corpus.templates import OBS_THEME, pick, pick_pair
from memworker.corpus.world import (
    DAY_SPAN,
    FIRST_DAY,
    USER,
    Ctx,
    Family,
    Person,
    clause,
    iso,
    lower_start,
    rng_for,
    session_start,
    typo,
)
from memworker.inference import schema
from memworker.spans import candidate_spans
from memworker.textnorm import bare_name, mentions, norm

P_EMPTY = 0.15  # share of episodes where nothing durable is said
P_INSUFFICIENT = 0.37  # share of reflect rows whose evidence cannot answer
P_OBSERVATION = 0.6  # share of consolidate rows with a supported observation
P_MERGE = 0.55  # chance a user fragment joins the turn before it (several topics in one turn)
MAX_EVIDENCE = 10
MAX_OBSERVATION_CHARS = 160  # the codec's tightest statement cap
MAX_ANSWER_CHARS = 160  # the codec's tightest answer cap
MAX_CLAIMS = 7
#: estimated tokens for the events and stored facts of an extract prompt (pessimistic estimate;
#: keeps the full prompt under 1,536 tokens with today's ~440-token instructions)
EVENTS_BUDGET = 900

_DENSE = re.compile(r"\S*[\d_][\S]*")
#: claims' weight against MAX_CLAIMS: behaviours with two claims or two quoted events weigh more
CLAIM_WEIGHT = {"plan_vs_done": 2.0, "same_name": 2.0, "coreference": 1.5, "multi_source": 1.5,
                "tool_confirmed": 2.0}
_GOLDEN = 0.6180339887498949  # Weyl sequences: shares hold in every split, not just on average
_SQRT2 = 0.4142135623730951
#: predicates that answer each other's questions: no abstention about one when another is known
OVERLAP = (
    frozenset({"works_at", "job_title", "leads_team", "on_team", "works_from", "runs_business"}),
    frozenset({"hobby", "plays", "paints_with", "practises", "collects", "member_of",
               "plays_in", "plays_position"}),
    frozenset({"studies", "attends", "enrolled_in", "learning"}),
    frozenset({"diet", "favourite_cuisine", "allergic_to", "go_to_restaurant"}),
    frozenset({"lives_in", "home_type"}),
)
#: themes whose facts about one subject support a cautious synthesis (consolidation)
THEMES = {
    "work": {"works_at", "job_title", "leads_team", "on_team", "commutes_by", "works_from",
             "runs_business", "invoices_with", "sells_at", "owns_module", "reviews"},
    "hobby": {"hobby", "plays", "paints_with", "practises", "collects", "member_of", "plays_in",
              "plays_position", "rides", "goes_to_gym", "attends_class"},
    "food": {"diet", "favourite_cuisine", "allergic_to", "go_to_restaurant"},
    "learning": {"studies", "attends", "enrolled_in", "learning", "study_tool", "speaks"},
    "tools": {"uses_calendar", "uses_service", "uses_editor", "uses_tool", "uses_shell",
              "hosts_on", "phone", "prefers_format", "test_runner", "linter", "formatter",
              "package_manager", "ci_system"},
    "community": {"coordinates", "volunteers_at", "donates_to"},
    "home": {"home_type", "lives_in", "grocery_delivery", "does_chore"},
    "care": {"eats", "vet", "likes_toy", "needs_help_with"},
    "travel": {"airline_pref", "home_airport", "travel_insurance", "favourite_destination"},
}


def overlap_group(pred: str) -> frozenset[str]:
    return next((g for g in OVERLAP if pred in g), frozenset({pred}))


def theme_of(pred: str) -> str | None:
    return next((t for t, preds in THEMES.items() if pred in preds), None)


def scheduled(slot: int, step: float, share: float) -> bool:
    """True for about `share` of consecutive slots, evenly spread (low-discrepancy)."""
    return (slot * step + 0.5) % 1.0 < share


def est_tokens(text: str, overhead: int = 22) -> int:
    """Pessimistic token estimate of one prompt line (timestamps, ids and random strings such
    as fake keys tokenise densely)."""
    dense = sum(len(m.group(0)) for m in _DENSE.finditer(text))
    return overhead + len(text) * 10 // 29 + dense * 2 // 5


def _weights(domain_key: str) -> dict[str, float]:
    w = {b: 1.0 for b in behaviours.EXTRACT_BEHAVIOURS if b not in behaviours.CODING_ONLY}
    if domain_key == "coding":
        w["tool_confirmed"] = 1.6
    return w


def _choose(rng, weights: dict[str, float], k: int) -> list[str]:
    names = sorted(weights)
    picked: list[str] = []
    for _ in range(min(k, len(names))):
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


def _build(ctx: Ctx, builder, session: int) -> behaviours.Unit | None:
    for _ in range(4):
        try:
            return builder(ctx, session)
        except LookupError:
            continue
    return None


def _unit_tokens(unit: behaviours.Unit) -> int:
    return sum(est_tokens(" ".join(f.sents)) for f in unit.frags)


def _chitchat(ctx: Ctx, session: int) -> behaviours.Unit | None:
    dom = ctx.domain
    if not dom.chitchat:
        return None
    q, a = pick_pair(ctx, f"chitchat.{dom.key}", dom.chitchat)
    return behaviours.Unit("", [behaviours.Frag("user", [q], session=session),
                                behaviours.Frag("assistant", [a], session=session, fill=False)])


def _story(ctx: Ctx, session: int) -> behaviours.Unit:
    sents = [pick(ctx, "story")]
    if ctx.rng.random() < 0.5:
        more = pick(ctx, "story")
        if more not in sents:
            sents.append(more)
    if ctx.domain.smalltalk and ctx.rng.random() < 0.5:
        sents.append(pick(ctx, f"smalltalk.{ctx.domain.key}", ctx.domain.smalltalk))
    return behaviours.Unit("", [behaviours.Frag("user", sents, session=session)],
                           replies=[("reply.chatter", {})])


# ------------------------------------------------------------------------------ planning

def _plan_units(ctx: Ctx, empty: bool, n_sessions: int, max_claims: float = MAX_CLAIMS
                ) -> list[behaviours.Unit]:
    """The episode's units, each built for its session: behaviours (claimless ones in an empty
    episode), an event told in passing, hard negatives and chatter; at least one per session,
    within the token budget."""
    rng, domain = ctx.rng, ctx.family.domain
    plan: list[tuple[str, Any]] = []
    if empty:
        for name in _choose(rng, {k: 1.0 for k in behaviours.CLAIMLESS}, rng.randrange(1, 4)):
            plan.append((name, behaviours.CLAIMLESS[name]))
    else:
        names = _choose(rng, _weights(domain.key), rng.randrange(3, 7))
        passing = rng.random() < 0.8 and max_claims >= 4
        while len(names) > 1 and sum(CLAIM_WEIGHT.get(n, 1.0) for n in names) > (
                max_claims - (2 if passing else 0)):
            names.pop()
        plan += [(n, behaviours.BUILDERS[n]) for n in names]
        if passing:
            plan.append(("passing", behaviours.passing_event))
    for _ in range(rng.choice((1, 1, 2))):
        plan.append(("negative", behaviours.hard_negative))
    plan.append(("story", _story))
    if empty:  # no behaviour carries the window: more chatter, so it still has 6+ events
        plan += [("story", _story)] * (n_sessions - 1) + [("negative", behaviours.hard_negative)]
    if rng.random() < 0.6 or empty:
        plan.append(("chitchat", _chitchat))
    rng.shuffle(plan)
    # every session gets at least one unit; the rest go to random sessions
    while len(plan) < n_sessions:
        plan.append(("story", _story))
    sessions = list(range(n_sessions)) + [rng.randrange(n_sessions)
                                          for _ in range(len(plan) - n_sessions)]
    rng.shuffle(sessions)
    units: list[behaviours.Unit] = []
    used = 0
    for (name, builder), s in sorted(zip(plan, sessions, strict=True), key=lambda x: x[1]):
        unit = _build(ctx, builder, s)
        if unit is None:
            continue
        cost = _unit_tokens(unit)
        if used + cost > EVENTS_BUDGET * 0.62 and units and name in ("negative", "story",
                                                                    "chitchat", "passing"):
            continue
        used += cost
        units.append(unit)
    if not empty and not any(u.claims for u in units):
        for name in ("new_detail", "relative_date", "preference_exception"):
            unit = _build(ctx, behaviours.BUILDERS[name], 0)
            if unit is not None and unit.claims:
                units.insert(0, unit)
                break
    units = _drop_conflicts(units)
    present = {f.session for u in units for f in u.frags}
    for s in range(n_sessions):
        if s not in present:
            units.append(_story(ctx, s))
    units.sort(key=lambda u: u.frags[0].session)
    return units


def _drop_conflicts(units: list[behaviours.Unit]) -> list[behaviours.Unit]:
    """Units without claims whose forbidden values (injected, rejected, negated, undecided,
    failed) a claim of another unit happens to mention are dropped (the audit would read the
    claim as obeying or storing them)."""
    claims = [c for u in units for c in u.claims]
    out = []
    for u in units:
        bad = [t for r, t in u.forbidden if r != "secret" and any(
            c.value is not None and norm(c.value) == norm(t) or mentions(c.statement, t)
            for c in claims if c not in u.claims)]
        if not bad:
            out.append(u)
    return out


# ---------------------------------------------------------------------------------- layout

def _frag_text(frag: behaviours.Frag) -> str:
    return "\n".join(frag.sents) if frag.lines else " ".join(frag.sents)


def _reply_text(ctx: Ctx, parts: list[tuple[str, dict]]) -> str:
    out: list[str] = []
    for key, fields in parts[:2]:
        text = pick(ctx, key).format_map({"X": "", **fields})
        if text not in out:
            out.append(text[0].upper() + text[1:])
    return " ".join(out)


class _Layout:
    def __init__(self, ctx: Ctx, budget: int):
        self.ctx = ctx
        self.events: list[dict[str, Any]] = []
        self.clock: datetime | None = None
        self.left = budget

    def emit(self, role: str, text: str, trusted: bool = True, gap: tuple[int, int] = (1, 6)):
        assert self.clock is not None
        self.left -= est_tokens(text)
        self.clock += timedelta(minutes=self.ctx.rng.randrange(*gap),
                                seconds=self.ctx.rng.randrange(60))
        self.events.append({"index": len(self.events), "role": role,
                            "timestamp": iso(self.clock, self.ctx.family.offset), "text": text,
                            "trusted": trusted})


def _quotes_ok(frags: list[behaviours.Frag], claims_by_frag) -> bool:
    """Every quote of these fragments is a candidate span of their joined text."""
    text = " ".join(_frag_text(f) for f in frags)
    spans = set(candidate_spans(text))
    return all(q in spans for f in frags for q in claims_by_frag.get(id(f), ()))


def _greeting(ctx: Ctx, session: int, clock: datetime) -> str:
    if session > 0 and ctx.rng.random() < 0.5:
        return pick(ctx, "greet.back")
    key = ("greet.morning" if clock.hour < 12 else "greet.afternoon" if clock.hour < 18
           else "greet.evening")
    return pick(ctx, key)


def _layout(ctx: Ctx, units: list[behaviours.Unit], n_sessions: int, budget: int
            ) -> list[dict[str, Any]]:
    """Timestamped events: per session, the units' fragments as turns (user fragments often
    merged into one turn), each user turn answered by the assistant from its content."""
    fam, rng = ctx.family, ctx.rng
    lay = _Layout(ctx, budget)
    unit_of = {id(f): u for u in units for f in u.frags}
    # quotes each fragment must keep quotable (the sentence or clause of every claim source)
    quotes: dict[int, list[str]] = {}
    for u in units:
        for c in u.claims:
            for n, (f, _, _) in enumerate(c.sources):
                quotes.setdefault(id(f), []).append(c.quote(n))
    reserve = sum(est_tokens(_frag_text(f)) + 30 for u in units for f in u.frags)

    def room(text: str) -> bool:
        return est_tokens(text, 0) + 22 <= lay.left - reserve

    for s in range(n_sessions):
        lay.clock = session_start(ctx.days[s], rng)
        blocks = [list(u.frags) for u in units if u.frags[0].session == s]
        for b in list(blocks):  # "my sister ..." may come back after another topic
            if len(b) == 2 and b[1].defer and rng.random() < 0.6:
                i = blocks.index(b)
                if i + 1 < len(blocks):
                    blocks[i] = b[:1]
                    blocks.insert(i + 2, b[1:])
        frags = [f for b in blocks for f in b]
        turn: list[behaviours.Frag] = []
        greet = _greeting(ctx, s, lay.clock) if rng.random() < 0.65 else None

        def flush(next_frag: behaviours.Frag | None) -> None:
            nonlocal turn
            if not turn:
                return
            lay.emit("user", " ".join(_frag_text(f) for f in turn))
            for f in turn:
                f.event = len(lay.events) - 1
            parts = []
            for f in turn:  # a unit with one reply per fragment answers fragment by fragment
                u = unit_of[id(f)]
                if len(u.replies) == len(u.frags) > 1:
                    parts.append(u.replies[u.frags.index(f)])
                else:
                    parts += [r for r in u.replies if r not in parts]
            needs_gap = next_frag is not None and next_frag.gap_before
            if next_frag is not None and next_frag.role == "assistant":
                turn = []
                return
            if parts and (needs_gap or rng.random() < 0.85):
                lay.emit("assistant", _reply_text(ctx, parts), gap=(0, 2))
            elif needs_gap or (not parts and rng.random() < 0.5):
                lay.emit("assistant", pick(ctx, "reply.chatter"), gap=(0, 2))
            turn = []

        for i, frag in enumerate(frags):
            reserve -= est_tokens(_frag_text(frag)) + 30
            mergeable = frag.role == "user" and frag.trusted and frag.fill
            if mergeable:
                if frag.fill and rng.random() < fam.chatty * 0.5:
                    extra = pick(ctx, "story")
                    said = " ".join(_frag_text(f) for f in turn + [frag])
                    if room(extra * 2) and extra not in said:
                        frag.sents.insert(0, extra)
                        frag.lead = 1
                if greet and not turn and room(greet * 2):
                    frag.sents.insert(0, greet)
                    frag.lead += 1
                    greet = None
                if rng.random() < fam.typo_rate:
                    k = rng.randrange(len(frag.sents))
                    if k - frag.lead not in frag.clauses:
                        typed = typo(frag.sents[k], rng, frag.protect)
                        if all(w in typed for w in frag.intact if w in frag.sents[k]):
                            frag.sents[k] = typed
                if (turn and not frag.gap_before and rng.random() < P_MERGE
                        and _quotes_ok(turn + [frag], quotes)):
                    turn.append(frag)
                    continue
                flush(frag)
                turn = [frag]
                continue
            flush(frag)
            frag.event = len(lay.events)
            gap = (0, 2) if frag.role == "assistant" else (1, 6)
            lay.emit(frag.role, _frag_text(frag), frag.trusted, gap=gap)
            nxt = frags[i + 1] if i + 1 < len(frags) else None
            unit = unit_of[id(frag)]
            if (frag.role == "tool" or not frag.trusted) and unit.replies and (
                    nxt is None or nxt.role == "user") and unit.frags[-1] is frag:
                lay.emit("assistant", _reply_text(ctx, unit.replies), gap=(0, 2))
        flush(None)
        if ctx.domain.tools and rng.random() < 0.15:
            tool = rng.choice(ctx.domain.tools)
            lines = [behaviours.noise_line(ctx, tool) for _ in range(rng.randrange(1, 3))]
            if room("\n".join(lines)):
                lay.emit("tool", "\n".join(lines), trusted=False, gap=(0, 3))
        if rng.random() < 0.3 and room("x" * 40):
            lay.emit("user", pick(ctx, "user.close"))
    while len(lay.events) < 6:  # a window is at least six events: a little more chatter
        lay.emit("user", pick(ctx, "story"))
        lay.emit("assistant", pick(ctx, "reply.chatter"), gap=(0, 2))
    return lay.events


# ------------------------------------------------------------------------------------ rows

def _claim_doc(c: behaviours.Claim, ids: dict[str, str]) -> dict[str, Any]:
    return {
        "source_indices": [f.event for f, _, _ in c.sources],
        "quotes": [c.quote(n) for n in range(len(c.sources))],
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
    events: list[dict[str, Any]]
    stamps: dict[str, str]  # stored fact key -> the time it was stored


def _background(ctx: Ctx, n: int) -> list[tuple[behaviours.Existing, behaviours.Question]]:
    """True facts the store holds (consolidate material, reflect evidence), each with a question
    it answers. Subjects repeat on purpose (several facts about one person)."""
    out = []
    focus = [p for p in ctx.family.cast if p.kind in ("person", "pet", "project")]
    focus_person = ctx.rng.choice(focus) if focus else USER
    for _ in range(n * 4):
        if len(out) >= n:
            break
        attrs = [a for a in ctx.attrs() if a.subject in ("person", "pet", "project", "user")]
        if not attrs:
            break
        attr = ctx.rng.choice(attrs)
        try:
            if (attr.subject == focus_person.kind
                    and (focus_person.canon, attr.pred) not in ctx.used_keys):
                person = focus_person
            else:
                person = ctx.subject_for(attr)
            (value,) = ctx.value(attr.pool)
        except LookupError:
            continue
        fact = behaviours._existing(ctx, attr, person, value)
        name = "the user" if person is USER else person.canon
        out.append((fact, behaviours.Question(attr.ask.format_map({"N": name}), fact.statement,
                                              [fact.key], "", fact.subject, attr.pred, value)))
    return out


def claims_cap(inputs: dict[str, Any]) -> int:
    """How many claims the codec's dynamic schema (memworker.inference.schema) lets a model
    answer for this window: long windows get fewer."""
    return schema.build_schema("extract", inputs)["properties"]["claims"]["maxItems"]


def make_episode(family: Family, episode_id: str, seed: int, slot: int = 0
                 ) -> list[dict[str, Any]]:
    """The rows (extract, consolidate, reflect) of one episode of `family`. `slot` (the
    episode's number within its domain) spreads empty extractions and insufficient
    reflections evenly. The random draws happen in a fixed order (the same seed gives the same
    bytes): sessions, units, background, stored facts, layout, then each row. When the gold
    holds more claims than the codec's schema allows for the window, the episode is drawn again
    (its own stream per attempt) with at most that many claims."""
    max_claims = float(MAX_CLAIMS)
    for attempt in range(6):
        rows = _make_episode(family, episode_id, seed, slot, attempt, max_claims)
        n = len(rows[0]["gold"]["claims"])
        if n <= 1:
            return rows
        cap = claims_cap(rows[0]["input"])
        if n <= cap:
            return rows
        max_claims = min(max_claims, cap) - 0.5 * attempt
    raise AssertionError(f"{episode_id}: no draw fits the codec's claim cap")


def _make_episode(family: Family, episode_id: str, seed: int, slot: int, attempt: int,
                  max_claims: float) -> list[dict[str, Any]]:
    rng = (rng_for("episode", seed, episode_id) if attempt == 0
           else rng_for("episode", seed, episode_id, attempt))
    day0 = FIRST_DAY + timedelta(days=rng.randrange(DAY_SPAN))
    n_sessions = rng.choices((2, 3, 4), (0.4, 0.4, 0.2))[0]
    days: list[date] = [day0]
    for _ in range(n_sessions - 1):
        days.append(days[-1] + timedelta(days=rng.randrange(1, 12)))
    ctx = Ctx(rng, family, days)
    units = _plan_units(ctx, scheduled(slot, _GOLDEN, P_EMPTY), n_sessions, max_claims)
    background_qs = _background(ctx, rng.randrange(3, 6))
    background = [fact for fact, _ in background_qs]
    existing = [x for u in units for x in u.existing] + background[: rng.randrange(0, 3)]
    rng.shuffle(existing)
    budget = EVENTS_BUDGET - sum(est_tokens(x.statement, 10) for x in existing)
    events = _layout(ctx, units, n_sessions, budget)
    claims = [c for u in units for c in u.claims]
    claims = [c for _, _, c in sorted((min(f.event for f, _, _ in c.sources), i, c)
                                      for i, c in enumerate(claims))]
    stamps = {}
    for x in existing + background:
        t = datetime.fromisoformat(x.valid_from) + timedelta(
            hours=rng.randrange(7, 22), minutes=rng.randrange(60), seconds=rng.randrange(60))
        stamps[x.key] = iso(t, family.offset)
    episode = _Episode(
        ctx=ctx, episode_id=episode_id, slot=slot,
        base={"split": family.split, "domain": family.domain.key, "family": family.id,
              "episode": episode_id},
        units=units, claims=claims, existing=existing, background=background,
        background_qs=background_qs, events=events, stamps=stamps)
    extract_row = _extract_row(episode)
    consolidate_row = _consolidate_row(episode)
    reflect_row = _reflect_row(episode, extract_row["truth"]["facts"])
    return [extract_row, consolidate_row, reflect_row]


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


# ------------------------------------------------------------------------------ consolidate

def _observation(ctx: Ctx, facts: list[tuple[str, str, str, str]], theme: str) -> str:
    """A hedged synthesis of 2-3 facts (key, subject, predicate, statement) about one subject:
    the facts' own clauses joined by a linking template and a theme hedge."""
    subject = facts[0][1]
    short = "the user" if subject == "the user" else bare_name(subject)
    poss = "their" if subject == "the user" else f"{short}'s"
    clauses = [clause(f[3]) for f in facts]
    a = clauses[0]
    b = " and ".join(clauses[1:])
    hedge = pick(ctx, f"obs.theme.{theme}", OBS_THEME[theme]).format_map(
        {"N0": short, "P": poss, "p": "they" if subject == "the user" else "they"})
    text = pick(ctx, "obs.link").format_map({"A": a, "B": b, "H": hedge,
                                             "Hc": hedge[0].upper() + hedge[1:]})
    return text[0].upper() + text[1:]


def _consolidate_row(ep: _Episode) -> dict[str, Any]:
    """The consolidate row: stored and new facts in. The rule the gold follows: 2-3 facts about
    one subject that share a theme (work, hobbies, food, learning, tools) support one hedged
    observation citing all of them; facts that only share a subject support none. The row shows
    at most one such group (60 % of rows) or none (the other facts of a group are left out)."""
    ctx, rng = ep.ctx, ep.ctx.rng
    stored = [x for x in ep.existing if x.status == "current"] + [
        x for x in ep.background if x not in ep.existing]
    pool: list[tuple[str, str, str, str]] = [(x.key, x.subject, x.predicate, x.statement)
                                             for x in stored]
    pool += [(c.key, c.subject, c.predicate, c.statement) for c in ep.claims
             if c.kind not in ("retraction", "belief", "plan", "event", "relationship")]
    want = rng.random() < P_OBSERVATION

    def groups_of(facts) -> list[tuple[tuple[str, str], list]]:
        found: dict[tuple[str, str], list] = {}
        for f in facts:
            th = theme_of(f[2])
            if th:
                found.setdefault((f[1], th), []).append(f)
        return sorted((k, v) for k, v in found.items() if len(v) >= 2)

    options = groups_of(pool)
    if want and not options:  # add a stored fact that shares a theme with one in the pool
        extra: list[tuple[str, str, str, str]] = []
        options = _make_themed(ctx, pool, extra)
        pool += extra
    chosen = rng.choice(options) if want and options else None
    # leave out facts so that exactly the chosen group (or none) has two or more members
    keep = []
    for f in pool:
        key = (f[1], theme_of(f[2]))
        if chosen is not None and key == chosen[0]:
            if sum(1 for g in keep if (g[1], theme_of(g[2])) == key) < 3:
                keep.append(f)
        elif theme_of(f[2]) is None or not any((g[1], theme_of(g[2])) == key for g in keep):
            keep.append(f)
    statement = None
    if chosen is not None:  # an observation fits the codec's tightest statement cap (160)
        (subject, theme), _ = chosen
        facts = [f for f in keep if (f[1], theme_of(f[2])) == (subject, theme)]
        for n in (len(facts), 2, 2, 2):
            statement = _observation(ctx, facts[:n], theme)
            if len(statement) <= MAX_OBSERVATION_CHARS:
                break
        else:
            statement = None
        drop = facts[n:] if statement is not None else facts[1:]
        keep = [f for f in keep if f not in drop]
        if statement is None:
            chosen = None
    pool_facts = keep
    rng.shuffle(pool_facts)
    cids = {f[0]: f"F{i + 1}" for i, f in enumerate(pool_facts)}
    observations, cons_truth = [], []
    if chosen is not None and statement is not None:
        facts = [f for f in pool_facts if (f[1], theme_of(f[2])) == (subject, theme)]
        supports = sorted((cids[f[0]] for f in facts), key=lambda s: int(s[1:]))
        observations.append({"statement": statement, "supports": supports})
        cons_truth.append({"supports": supports, "subject": subject, "statement": statement,
                           "theme": theme})
    assert len(groups_of(pool_facts)) == len(observations)
    shared = sorted({f[1] for f in pool_facts if sum(g[1] == f[1] for g in pool_facts) > 1})
    return {
        **ep.base, "id": f"{ep.episode_id}-consolidate", "task": "consolidate",
        "behaviours": ["consolidation"] if observations else [],
        "input": {"facts": [{"id": cids[k], "statement": s} for k, _, _, s in pool_facts]},
        "gold": {"observations": observations},
        "truth": {"observations": cons_truth, "subjects_with_several_facts": shared,
                  "rule": "one observation per subject and theme with 2-3 facts; none otherwise"},
    }


def _make_themed(ctx: Ctx, pool, extra) -> list:
    """Store one more fact about a subject in the pool, of the same theme as one of its facts;
    returns the resulting [(subject, theme), facts] option (or [] when none can be made)."""
    for key, subject, pred, statement in sorted(pool):
        theme = theme_of(pred)
        if not theme:
            continue
        person = next((p for p in [USER, *ctx.family.cast] if p.canon == subject), None)
        if person is None:
            continue
        kind = "user" if person is USER else person.kind
        for attr in ctx.domain.attrs:
            if (attr.subject != kind or theme_of(attr.pred) != theme or attr.pred == pred
                    or (subject, attr.pred) in ctx.used_keys):
                continue
            try:
                (value,) = ctx.value(attr.pool)
            except LookupError:
                continue
            fact = behaviours._existing(ctx, attr, person, value)
            f = (fact.key, subject, attr.pred, fact.statement)
            extra.append(f)
            return [((subject, theme), [(key, subject, pred, statement), f])]
    # no fact in the pool can be paired: store two new facts of one theme about one subject
    people = [USER, *[p for p in ctx.family.cast if p.kind in ("person", "pet", "project")]]
    for person in ctx.rng.sample(people, len(people)):
        kind = "user" if person is USER else person.kind
        by_theme: dict[str, list] = {}
        for attr in ctx.domain.attrs:
            if attr.subject == kind and theme_of(attr.pred) and (
                    person.canon, attr.pred) not in ctx.used_keys:
                by_theme.setdefault(theme_of(attr.pred), []).append(attr)
        for theme, attrs in sorted(by_theme.items()):
            if len(attrs) < 2:
                continue
            made = []
            for attr in attrs[:2]:
                try:
                    (value,) = ctx.value(attr.pool)
                except LookupError:
                    break
                fact = behaviours._existing(ctx, attr, person, value)
                made.append((fact.key, person.canon, attr.pred, fact.statement))
            if len(made) == 2:
                extra.extend(made)
                return [((person.canon, theme), made)]
    return []


# ---------------------------------------------------------------------------------- reflect

def _evidence_items(ep: _Episode) -> dict[str, tuple[str, str]]:
    """{key: (timestamp, text)} of everything a reflect row may show as evidence."""
    items: dict[str, tuple[str, str]] = {}
    for x in ep.existing + ep.background:
        items[x.key] = (ep.stamps[x.key], x.statement)
    for c in ep.claims:
        ev = ep.events[max(f.event for f, _, _ in c.sources)]
        items[c.key] = (ev["timestamp"], c.evidence_text())
    for key, text, frag in (e for u in ep.units for e in u.evidence):
        items[key] = (ep.events[frag.event]["timestamp"], text[:600])
    return items


def _about_question(ep: _Episode) -> behaviours.Question | None:
    """A question that needs two or more evidence items: everything current about one subject."""
    by_subject: dict[str, list[tuple[str, str, str]]] = {}
    stale = {(x.subject, x.predicate) for x in ep.existing if x.status != "current"}
    for x in dict.fromkeys(ep.existing + ep.background):
        if x.status == "current":
            by_subject.setdefault(x.subject, []).append((x.key, x.predicate, x.statement))
    for c in ep.claims:
        if c.kind not in ("belief", "retraction"):
            by_subject.setdefault(c.subject, []).append((c.key, c.predicate, c.statement))
    options = sorted(s for s, items in by_subject.items()
                     if len(items) >= 2 and s != "the user" and s not in
                     {k[0] for k in stale})
    if not options:
        return None
    subject = ep.ctx.rng.choice(options)
    items = by_subject[subject][:4]
    tpl = pick(ep.ctx, "a.about")
    while len(items) > 2 and len(tpl.format_map({"X": " ".join(s for _, _, s in items)})) > \
            MAX_ANSWER_CHARS:
        items = items[:-1]
    answer = tpl.format_map({"X": " ".join(s for _, _, s in items)})
    if len(answer) > MAX_ANSWER_CHARS:
        return None
    q = pick(ep.ctx, "q.about").format_map({"N": subject})
    return behaviours.Question(q, answer, [k for k, _, _ in items], "", subject, "*", None)


def _ago_question(ep: _Episode, asked: datetime) -> behaviours.Question | None:
    """A temporal question ("How long ago did ...?") answered from a dated past event."""
    dated = [c for c in ep.claims if c.when and c.kind == "event" and c.when.precision == "day"
             and c.predicate in ("did_with", "completed")]
    if not dated:
        return None
    c = ep.ctx.rng.choice(dated)
    days = (asked.date() - date.fromisoformat(c.when.date)).days
    if c.predicate == "did_with":
        verb = next(v for v in behaviours.PASSING_BASE if c.value.startswith(v + " "))
        what = f"{behaviours.PASSING_BASE[verb]} {c.value[len(verb) + 1:]}"
    else:
        what = c.value
    q = pick(ep.ctx, "q.ago").format_map({"X": f"the user {what}"})
    answer = pick(ep.ctx, "a.ago").format_map({"D": str(days), "E": c.when.date,
                                               "X": clause(c.statement)})
    return behaviours.Question(q, answer[0].upper() + answer[1:], [c.key], "relative_date",
                               c.subject, c.predicate, c.value)


def _reflect_row(ep: _Episode, facts_truth: list[dict[str, Any]]) -> dict[str, Any]:
    """The reflect row: a question about the episode (or one no evidence answers, often a near
    miss), the evidence plus any injected text and distractors, the cited ids as gold."""
    rng, offset = ep.ctx.rng, ep.ctx.family.offset
    last = datetime.fromisoformat(ep.events[-1]["timestamp"].replace("Z", "+00:00"))
    asked = last + timedelta(days=rng.randrange(0, 6), minutes=rng.randrange(5, 600))
    asked_at = asked.strftime("%Y-%m-%dT%H:%M:%S") + offset
    items = _evidence_items(ep)
    questions = [q for u in ep.units for q in u.questions]
    for extra in (_about_question(ep), _ago_question(ep, asked)):
        if extra is not None:
            questions += [extra, extra]  # weigh the multi-evidence and temporal questions up
    known = {(t["subject"], t["predicate"]) for t in facts_truth} | {
        (x.subject, x.predicate) for x in ep.background}
    insufficient = scheduled(ep.slot, _SQRT2, P_INSUFFICIENT)
    questions += [q for _, q in ep.background_qs][:2]  # stored facts are asked about too
    injected = [t for u in ep.units for r, t in u.forbidden if r == "injected"]
    questions = [q for q in questions if not any(mentions(q.answer, t) for t in injected)]
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
        if answer == question.statement_like():
            answer = _paraphrase(ep.ctx, answer)
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
    if question is not None and question.predicate == "*":  # "what do we know about X": the
        subject_of = {x.key: x.subject for x in ep.existing + ep.background}  # evidence holds
        subject_of.update({c.key: c.subject for c in ep.claims})  # no uncited fact about X
        others = [k for k in others if subject_of.get(k) != question.subject]
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


def _paraphrase(ctx: Ctx, statement: str) -> str:
    """A single-fact answer in one of several phrasings (never only the stored statement)."""
    text = pick(ctx, "a.fact").format_map({"X": statement, "x": lower_start(statement)})
    return text[0].upper() + text[1:]


def _unanswerable(ctx: Ctx, known: set[tuple[str, str]], claims: list[behaviours.Claim],
                  background: list[behaviours.Existing]) -> tuple[str, str, dict[str, Any]]:
    """A question whose answer no evidence holds. Often a near miss: the same predicate is known
    for another subject, or the subject has other facts; never a predicate that overlaps a
    known one of the same subject (a job question when the employer is known)."""
    mentioned = {c.subject for c in claims} | {x.subject for x in background}
    known_preds = {p for _, p in known}
    people: list[Person] = [USER] + [p for p in ctx.family.cast if p.canon in mentioned]
    people += [p for p in ctx.family.cast if p.canon not in mentioned]
    if ctx.rng.random() < 0.5:  # near miss first: a predicate someone else has
        people = people[1:] + people[:1]
    for person in people:
        kind = "user" if person is USER else person.kind
        blocked = {q for s, p in known if s == person.canon for q in overlap_group(p)}
        attrs = [a for a in ctx.domain.attrs if a.subject == kind and a.pred not in blocked]
        near = [a for a in attrs if a.pred in known_preds]
        if attrs:
            attr = ctx.rng.choice(near or attrs)
            name = "the user" if person is USER else person.canon
            short = "the user's" if person is USER else f"{person.name}'s"
            answer = pick(ctx, "a.missing").format_map(
                {"X": f"{short} {attr.topic}", "Y": f"anything about {short} {attr.topic}"})
            return (attr.ask.format_map({"N": name}), answer[0].upper() + answer[1:],
                    {"subject": person.canon, "predicate": attr.pred, "missing": attr.topic,
                     "near_miss": bool(near)})
    person = ctx.rng.choice([USER] + [p for p in ctx.family.cast if p.kind == "person"])
    name = "the user" if person is USER else person.canon
    short = "the user's" if person is USER else f"{person.name}'s"
    q, topic = pick(ctx, "q.generic").split("|")
    answer = pick(ctx, "a.missing").format_map(
        {"X": f"{short} {topic}", "Y": f"anything about {short} {topic}"})
    return (q.format_map({"N": name}), answer[0].upper() + answer[1:],
            {"subject": person.canon, "predicate": topic.replace(" ", "_"), "missing": topic,
             "near_miss": False})
