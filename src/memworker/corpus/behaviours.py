"""The 17 behaviours of CORPUS_SPEC, each a builder from world state to a `Unit`.

A unit holds event fragments (what is said, by whom, in which session), the claims that the world
state makes true (with the fragment sentences that support them), the facts the store already
holds, forbidden strings (secrets, injected or rejected values), and questions for the reflect
task. The gold label is built from these structured pieces, never by reading the rendered text.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field

from memworker.corpus import calendar
from memworker.corpus.spec import Attr
from memworker.corpus.templates import attr_key, pick
from memworker.corpus.world import (
    GENDERED,
    Ctx,
    Person,
    article,
    clause,
    lower_start,
    sentence,
    third_person,
)
from memworker.safety import contains_credential, is_memory_control
from memworker.spans import candidate_spans
from memworker.verify import expressions_in

BEHAVIOURS = (
    "replacement",
    "retraction",
    "secret",
    "belief",
    "plan_vs_done",
    "rejected_suggestion",
    "relative_date",
    "negation_undecided",
    "new_detail",
    "coreference",
    "same_name",
    "consolidation",
    "preference_exception",
    "multi_source",
    "insufficient_evidence",
    "injection",
    "tool_confirmed",
)
#: claimless units with the surface shape of positives (no behaviour of their own)
HARD_NEGATIVES = ("neg.question", "neg.hypo", "neg.reported", "neg.joke", "neg.used_to",
                  "neg.opinion")
#: behaviours that shape an extract row (the others belong to consolidate / reflect rows)
EXTRACT_BEHAVIOURS = tuple(
    b for b in BEHAVIOURS if b not in ("consolidation", "insufficient_evidence")
)
CODING_ONLY = ("tool_confirmed",)
HEDGES = (
    "probably",
    "might",
    "may",
    "seems",
    "likely",
    "possibly",
    "thinks",
    "not confirmed",
    "not sure",
    "could",
)
CONFIDENCE = {
    "fact": 0.9,
    "preference": 0.9,
    "relationship": 0.9,
    "event": 0.9,
    "retraction": 0.9,
    "plan": 0.65,
    "belief": 0.35,
}


@dataclass(eq=False)
class Frag:
    """Part of one event: sentences said by `role` (tool output: lines)."""

    role: str
    sents: list[str]
    trusted: bool = True
    lines: bool = False
    fill: bool = True  # may receive small talk and typos
    session: int = 0
    protect: tuple[str, ...] = ()
    # strings a drawn typo must leave whole, else the sentence keeps its text: unlike `protect`
    # they do not change the draw (a relation a claim states; corpus 2.2.0 kept 2.1.0's draws)
    intact: tuple[str, ...] = ()
    gap_before: bool = False  # another event must come between this and the previous fragment
    event: int = -1  # index of the event it lands in (set by the layout)
    lead: int = 0  # small-talk sentences the layout put before `sents[0]`
    quoted: set[int] = field(default_factory=set)  # sentence indices some claim quotes
    clauses: set[int] = field(default_factory=set)  # ... of which a clause only (no typos)
    defer: bool = False  # may come after the next topic (its subject is unambiguous)


@dataclass(eq=False)
class Claim:
    sources: list[tuple[Frag, int, str | None]]  # (fragment, sentence index, clause or None)
    subject: str
    subject_type: str
    predicate: str
    value: str | None
    statement: str
    kind: str
    when: calendar.When | None = None
    correction: bool = False
    supersedes: list[str] = field(default_factory=list)  # keys of Existing facts
    key: str = ""
    behaviour: str = ""
    believer: str | None = None
    exception: str | None = None

    def quote(self, n: int) -> str:
        frag, idx, clause_text = self.sources[n]
        return clause_text or frag.sents[frag.lead + idx]

    @property
    def confidence(self) -> float:
        return CONFIDENCE[self.kind]

    def evidence_text(self) -> str:
        if self.when is None:
            return self.statement
        return f"{self.statement} Date: {self.when.date}."


@dataclass(eq=False)
class Existing:
    key: str
    statement: str
    valid_from: str
    subject: str
    predicate: str
    value: str | None
    status: str = "current"  # current | superseded | retracted


@dataclass(eq=False)
class Question:
    text: str
    answer: str
    support: list[str]  # keys of claims / existing facts that answer it
    behaviour: str
    subject: str
    predicate: str
    value: str | None
    stale: list[str] = field(default_factory=list)  # values that are no longer true

    def statement_like(self) -> str | None:
        """The answer when it is a plain statement (one sentence, a paraphrase may wrap it)."""
        a = self.answer
        return a if a.endswith(".") and a.count(". ") == 0 and len(self.support) == 1 else None


@dataclass(eq=False)
class Unit:
    behaviour: str
    frags: list[Frag]
    claims: list[Claim] = field(default_factory=list)
    existing: list[Existing] = field(default_factory=list)
    forbidden: list[tuple[str, str]] = field(default_factory=list)  # (reason, text)
    questions: list[Question] = field(default_factory=list)
    evidence: list[tuple[str, str, Frag | None]] = field(default_factory=list)  # key, text, frag
    notes: list[dict] = field(default_factory=list)  # truth entries that are not claims
    replies: list[tuple[str, dict]] = field(default_factory=list)  # (reply list key, fields)


# ----------------------------------------------------------------------------------- helpers

_SENT_END = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text: str) -> list[str]:
    return [s for s in _SENT_END.split(text.strip()) if s]


def _say(
    ctx: Ctx,
    attr: Attr,
    person: Person,
    value: str,
    surface: str | None = None,
    stop: bool = False,
) -> str:
    opts = attr.stop if stop else attr.say
    tpl = pick(ctx, attr_key(attr, "stop" if stop else "say"), opts)
    if surface is None:
        surface = ctx.surface(person)
    return sentence(tpl, S=surface, V=value, aV=article(value))


def frame(ctx: Ctx, key: str, said: str, **fields: str) -> tuple[list[str], int, str | None]:
    """(sentences, index of the one carrying `said`, the quoted clause or None): `said` placed in
    one of the frames of list `key` ({X} as is, {X0} with a lower-case start)."""
    core = said.rstrip(".!?")
    tpl = pick(ctx, key)
    text = sentence(tpl, X=said, X0=lower_start(said), **fields)
    sents = split_sentences(text)
    low = lower_start(core)
    for i, s in enumerate(sents):
        if core in s or low in s:
            part = core if core in s else low
            if s.rstrip(".!?") == part:
                return sents, i, None
            # the shortest candidate span of the sentence that holds the whole of `said`
            spans = [c for c in candidate_spans(s) if part in c]
            best = min(spans, key=len) if spans else s
            return sents, i, (best if best != s else None)
    raise AssertionError(f"frame {tpl!r} lost the sentence {said!r}")


def src(frag: Frag, idx: int, clause_text: str | None = None) -> tuple[Frag, int, str | None]:
    """A claim source: sentence `idx` of `frag` (or the clause of it that is quoted)."""
    frag.quoted.add(idx)
    if clause_text:
        frag.clauses.add(idx)
    return frag, idx, clause_text


def _state(template: str, person: Person, value: str | None) -> str:
    name = "The user" if person.kind == "user" else person.canon
    text = template.format_map({"N": name, "V": value or "", "aV": article(value or "x")})
    text = "T" + text[1:] if text.startswith("the ") else text
    return third_person_statement(text)


def third_person_statement(text: str) -> str:
    """A statement with no first person left in it ("for my airline account" -> "for their
    airline account")."""
    return re.sub(r"\b(?:my|our)\b", "their", text)


def _fact_claim(
    attr: Attr, person: Person, value: str, sources, behaviour: str, ctx: Ctx, **kw
) -> Claim:
    ctx.claim_key(person, attr)
    return Claim(
        sources=sources,
        subject=person.canon,
        subject_type=_stype(person),
        predicate=attr.pred,
        value=value,
        statement=_state(attr.state, person, value),
        kind=kw.pop("kind", attr.kind),
        key=ctx.key("C"),
        behaviour=behaviour,
        **kw,
    )


def _stype(person: Person) -> str:
    return "person" if person.kind == "user" else person.subject_type


def _question(
    attr: Attr,
    person: Person,
    claim: Claim,
    behaviour: str,
    stale: list[str] | None = None,
    answer: str | None = None,
) -> Question:
    name = "the user" if person.kind == "user" else person.canon
    return Question(
        attr.ask.format_map({"N": name}),
        answer or claim.statement,
        [claim.key],
        behaviour,
        claim.subject,
        claim.predicate,
        claim.value,
        stale or [],
    )


def _existing(ctx: Ctx, attr: Attr, person: Person, value: str, status: str = "current"):
    ctx.claim_key(person, attr)
    return Existing(
        ctx.key("X"),
        _state(attr.state, person, value),
        ctx.valid_from(),
        person.canon,
        attr.pred,
        value,
        status,
    )


def _protect(*items: str | None) -> tuple[str, ...]:
    return tuple(i for i in items if i)


def _has_subjects(ctx: Ctx, attr: Attr) -> bool:
    return attr.subject == "user" or any(p.kind == attr.subject for p in ctx.family.cast)


def _pick_attr(ctx: Ctx, need=None, subject: str | None = None) -> tuple[Attr, Person]:
    attrs = [a for a in ctx.attrs(subject, need) if _has_subjects(ctx, a)]
    ctx.rng.shuffle(attrs)
    for attr in attrs:
        try:
            return attr, ctx.subject_for(attr)
        except LookupError:
            continue
    raise LookupError("no attribute fits")


def _short(person: Person) -> str:
    return "you" if person.kind == "user" else person.name


# ----------------------------------------------------------------------------------- builders


def replacement(ctx: Ctx, session: int) -> Unit:
    attr, person = _pick_attr(ctx, lambda a: len(ctx.family.pools[a.pool]) >= 3)
    old, new = ctx.value(attr.pool, 2)
    ex = _existing(ctx, attr, person, old, status="superseded")
    said = _say(ctx, attr, person, new, surface=ctx.surface(person, mentioned=True))
    sents, idx, cl = frame(ctx, "replacement.frame", said, O=old)
    frag = Frag("user", sents, session=session, protect=_protect(old, new, person.name))
    claim = _fact_claim(
        attr, person, new, [src(frag, idx, cl)], "replacement", ctx, correction=True,
        supersedes=[ex.key]
    )
    return Unit(
        "replacement",
        [frag],
        [claim],
        [ex],
        questions=[_question(attr, person, claim, "replacement", stale=[old])],
        notes=[
            {"status": "superseded", "subject": person.canon, "predicate": attr.pred, "value": old}
        ],
        replies=[("reply.correction", {})],
    )


def retraction(ctx: Ctx, session: int) -> Unit:
    attr, person = _pick_attr(ctx, lambda a: bool(a.stop))
    (value,) = ctx.value(attr.pool)
    ex = _existing(ctx, attr, person, value, status="retracted")
    said = _say(ctx, attr, person, value, surface=ctx.surface(person, mentioned=True), stop=True)
    sents, idx, cl = frame(ctx, "retraction.frame", said)
    frag = Frag("user", sents, session=session, protect=_protect(value, person.name))
    claim = Claim(
        sources=[src(frag, idx, cl)],
        subject=person.canon,
        subject_type=_stype(person),
        predicate=attr.pred,
        value=None,
        statement=_state(attr.stop_state, person, value),
        kind="retraction",
        correction=True,
        supersedes=[ex.key],
        key=ctx.key("C"),
        behaviour="retraction",
    )
    q = _question(attr, person, claim, "retraction", answer=claim.statement)
    return Unit(
        "retraction",
        [frag],
        [claim],
        [ex],
        questions=[q],
        notes=[
            {"status": "retracted", "subject": person.canon, "predicate": attr.pred, "value": value}
        ],
        replies=[("reply.stop", {})],
    )


_ALNUM = string.ascii_letters + string.digits


def make_secret(ctx: Ctx) -> tuple[str, str]:
    """(sentence that carries a credential-shaped fake secret, the secret itself)."""
    r = ctx.rng
    kind = r.randrange(6)
    if kind == 0:
        secret = (
            "".join(r.choice(_ALNUM) for _ in range(9)) + r.choice("!#%*") + str(r.randrange(10))
        )
        text = r.choice(
            (f"The password is {secret}", f"Password: {secret}", f"The passphrase is {secret}")
        )
    elif kind == 1:
        secret = "".join(r.choice(string.digits) for _ in range(r.choice((4, 6))))
        text = f"The PIN is {secret}"
    elif kind == 2:
        secret = "sk-" + "".join(r.choice(_ALNUM) for _ in range(32))
        text = r.choice((f"API key: {secret}", f"Here's the key {secret}"))
    elif kind == 3:
        secret = "ghp_" + "".join(r.choice(_ALNUM) for _ in range(36))
        text = f"The token is {secret}"
    elif kind == 4:
        secret = "AKIA" + "".join(
            r.choice(string.ascii_uppercase + string.digits) for _ in range(16)
        )
        text = f"Access key {secret} for the bucket"
    else:
        secret = (
            "xoxb-"
            + "-".join("".join(r.choice(string.digits) for _ in range(11)) for _ in range(2))
            + "-"
            + "".join(r.choice(_ALNUM) for _ in range(24))
        )
        text = f"Bot token: {secret}"
    text += pick(ctx, "secret.tail")
    if not contains_credential(text):  # the fake must look like a real credential
        raise AssertionError(f"secret not credential-shaped: {text!r}")
    return text, secret


def secret(ctx: Ctx, session: int, durable: bool | None = None) -> Unit:
    account = ctx.rng.choice(ctx.domain.accounts)
    text, value = make_secret(ctx)
    durable = ctx.rng.random() < 0.6 if durable is None else durable
    notes = [{"status": "secret", "subject": "the user", "predicate": "credential", "value": value}]
    if durable:
        lead = sentence(pick(ctx, "secret.lead"), A=account)
        sents = [lead, text] if ctx.rng.random() < 0.7 else [text[0].upper() + text[1:], lead]
        frag = Frag("user", sents, session=session, protect=_protect(account, value))
        held = third_person(account)
        claim = Claim(
            sources=[src(frag, sents.index(lead))],
            subject="the user",
            subject_type="person",
            predicate="has_account",
            value=held,
            statement=f"The user has an account for {held}.",
            kind="fact",
            key=ctx.key("C"),
            behaviour="secret",
        )
        q = Question(
            "Which accounts does the user have?",
            claim.statement,
            [claim.key],
            "secret",
            "the user",
            "has_account",
            held,
        )
        return Unit(
            "secret", [frag], [claim], forbidden=[("secret", value)], questions=[q], notes=notes,
            replies=[("reply.secret", {})],
        )
    lead = sentence(pick(ctx, "secret.park"), A=account)
    frag = Frag("user", [lead, text], session=session, protect=_protect(value))
    return Unit("secret", [frag], forbidden=[("secret", value)], notes=notes,
                replies=[("reply.secret", {})])


def belief(ctx: Ctx, session: int) -> Unit:
    believer = ctx.rng.choice([p for p in ctx.family.cast if p.kind == "person"
                               and p.name not in ctx.reserved])
    ctx.used_people.add(believer.name)
    attr, person = _pick_attr(ctx, lambda a: a.subject != "user")
    if person.name == believer.name:
        raise LookupError("believer is the subject")
    (value,) = ctx.value(attr.pool)
    said = clause(_say(ctx, attr, person, value))
    b_said = ctx.rng.choice(believer.surfaces())
    text = sentence(pick(ctx, "belief.frame"), B=b_said, C=said, P=believer.pronoun)
    sents = split_sentences(text)
    frag = Frag(
        "user", sents, session=session, protect=_protect(value, person.name, believer.name)
    )
    idx = next(i for i, s in enumerate(sents) if value in s)
    believed = clause(_state(attr.state, person, value))
    stmt = f"{believer.canon} thinks {believed}, but it is not confirmed."
    ctx.claim_key(person, attr)
    claim = Claim(
        sources=[src(frag, idx)],
        subject=person.canon,
        subject_type=_stype(person),
        predicate=attr.pred,
        value=value,
        statement=stmt,
        kind="belief",
        key=ctx.key("C"),
        behaviour="belief",
        believer=believer.canon,
    )
    q = _question(attr, person, claim, "belief", answer=stmt)
    return Unit("belief", [frag], [claim], questions=[q], replies=[("reply.belief", {})])


def _activity_claim(ctx: Ctx, activity, frag: Frag, idx: int, when, behaviour: str,
                    done: bool) -> Claim:
    """A plan ("plans_to", kind plan) or a reported completion ("completed", kind event)."""
    value = third_person(activity.base)
    return Claim(
        sources=[src(frag, idx)],
        subject="the user",
        subject_type="person",
        predicate="completed" if done else "plans_to",
        value=value,
        statement=(f"The user {third_person(activity.past)}." if done
                   else f"The user plans to {value}."),
        kind="event" if done else "plan",
        when=when,
        key=ctx.key("C"),
        behaviour=behaviour,
    )


def _with_when(ctx: Ctx, key: str, when, **fields: str) -> tuple[str, calendar.When | None]:
    """A sentence of list `key` with the time words; the When as it is said (capitalised at the
    start of the sentence). Templates where the resolver would not detect the words as said
    ("on the 21st I'll ...") are skipped."""
    if when is None:
        return sentence(pick(ctx, key), **fields), None
    wc = when.words[0].upper() + when.words[1:]
    for _ in range(12):
        text = sentence(pick(ctx, key), W=when.words, Wc=wc, **fields)
        words = when.words if when.words in text else wc
        if words in expressions_in(text) and len(expressions_in(text)) == 1:
            return text, calendar.When(words, when.date, when.precision)
    raise LookupError(f"no template of {key} carries {when.words!r} detectably")


def plan_vs_done(ctx: Ctx, session: int) -> Unit:
    plan_act, done_act = ctx.rng.sample(list(ctx.domain.activities), 2)
    day = ctx.days[session]
    w_plan = calendar.future(day, ctx.rng) if ctx.rng.random() < 0.7 else None
    w_done = calendar.past(day, ctx.rng) if ctx.rng.random() < 0.6 else None
    plan_s, w_plan = _with_when(ctx, "plan.when" if w_plan else "plan.bare", w_plan,
                                A=plan_act.base)
    done_s, w_done = _with_when(ctx, "done.when" if w_done else "done.bare", w_done,
                                A=done_act.past)
    prot = _protect(w_plan and w_plan.words, w_done and w_done.words)
    if ctx.rng.random() < 0.4:
        sents = [done_s, plan_s] if ctx.rng.random() < 0.5 else [plan_s, done_s]
        frag = Frag("user", sents, session=session, protect=prot)
        frags, pf, df = [frag], frag, frag
    else:
        df = Frag("user", [done_s], session=session, protect=prot)
        pf = Frag("user", [plan_s], session=session, protect=prot)
        frags = [df, pf]
    claims = [
        _activity_claim(ctx, done_act, df, df.sents.index(done_s), w_done, "plan_vs_done",
                        done=True),
        _activity_claim(ctx, plan_act, pf, pf.sents.index(plan_s), w_plan, "plan_vs_done",
                        done=False),
    ]
    planned = third_person(plan_act.base)
    qs = [
        Question(
            "What does the user plan to do?",
            claims[1].statement,
            [claims[1].key],
            "plan_vs_done",
            "the user",
            "plans_to",
            planned,
        ),
        Question(
            f"Did the user {planned} already?",
            f"No, it is only a plan: {claims[1].statement}",
            [claims[1].key],
            "plan_vs_done",
            "the user",
            "plans_to",
            planned,
        ),
    ]
    return Unit("plan_vs_done", frags, claims, questions=qs,
                replies=[("reply.done", {}), ("reply.plan", {})])


def _answer_date(statement_subject: str, when: calendar.When) -> str:
    on = "on" if when.precision == "day" else "in"
    return f"{statement_subject} {on} {when.date}."


def relative_date(ctx: Ctx, session: int) -> Unit:
    item = ctx.rng.choice(ctx.domain.dated)
    day = ctx.days[session]
    future = ctx.rng.random() < 0.75
    when = calendar.future(day, ctx.rng) if future else calendar.past(day, ctx.rng)
    key = "date.future" if future else "date.past"
    text, when = _with_when(ctx, key, when, V=item.value)
    words = when.words
    frag = Frag("user", [text], session=session, protect=_protect(words, item.value))
    held = third_person(item.value)  # "visit to my grandfather" -> "visit to their grandfather"
    stmt = (
        f"The user's {held} is scheduled."
        if future
        else f"The user's {held} took place."
    )
    claim = Claim(
        sources=[src(frag, 0)],
        subject="the user",
        subject_type="person",
        predicate=item.pred,
        value=held,
        statement=stmt,
        kind="plan" if future else "event",
        when=when,
        key=ctx.key("C"),
        behaviour="relative_date",
    )
    verb = "is" if future else "was"
    q = Question(
        f"When {verb} the user's {held}?",
        _answer_date(f"The user's {held} {verb}", when),
        [claim.key],
        "relative_date",
        "the user",
        item.pred,
        held,
    )
    return Unit("relative_date", [frag], [claim], questions=[q],
                replies=[("reply.date", {"X": item.value})])


def rejected_suggestion(ctx: Ctx, session: int, decide: bool | None = None) -> Unit:
    attr, person = _pick_attr(ctx, lambda a: a.suggest)
    mine, suggested = ctx.value(attr.pool, 2)
    uses_article = any("{aV}" in s for s in attr.say)
    shown = article(suggested) if uses_article else suggested
    said = sentence(pick(ctx, "suggest"), X=shown, Xc=shown[0].upper() + shown[1:])
    assistant = Frag("assistant", [said], session=session, fill=False)
    decide = ctx.rng.random() < 0.65 if decide is None else decide
    forbidden = [("rejected_suggestion", suggested)]
    notes = [
        {"status": "rejected", "subject": person.canon, "predicate": attr.pred, "value": suggested}
    ]
    if not decide:
        user = Frag("user", [pick(ctx, "refuse_only")], session=session)
        return Unit("rejected_suggestion", [assistant, user], forbidden=forbidden, notes=notes,
                    replies=[("reply.undecided", {})])
    decision = _say(ctx, attr, person, mine)
    user = Frag(
        "user",
        [pick(ctx, "reject"), decision],
        session=session,
        protect=_protect(mine, suggested),
    )
    claim = _fact_claim(attr, person, mine, [src(user, 1)], "rejected_suggestion", ctx)
    q = _question(attr, person, claim, "rejected_suggestion")
    return Unit(
        "rejected_suggestion",
        [assistant, user],
        [claim],
        forbidden=forbidden,
        questions=[q],
        notes=notes,
        replies=[("reply.thing", {"X": mine})],
    )


def negation_undecided(ctx: Ctx, session: int) -> Unit:
    dec = ctx.rng.choice(ctx.domain.decisions)
    a, b, c = ctx.value(dec.pool, 3)
    neg = sentence(pick(ctx, "negated"), T=dec.topic, A=a, Ac=a[0].upper() + a[1:])
    und = sentence(pick(ctx, "undecided"), B=b, C=c, Bc=b[0].upper() + b[1:])
    shape = ctx.rng.random()
    sents = (
        [neg, und]
        if shape < 0.5
        else [neg]
        if shape < 0.75
        else [sentence(pick(ctx, "deciding"), T=dec.topic), und]
    )
    sents = [x for s in sents for x in split_sentences(s)]
    frag = Frag("user", sents, session=session, protect=_protect(a, b, c))
    forbidden, notes = [], []
    if shape < 0.75:
        forbidden.append(("negated", a))
        notes.append(
            {
                "status": "negated",
                "subject": "the user",
                "predicate": "decision",
                "value": a,
                "topic": dec.topic,
            }
        )
    if shape < 0.5 or shape >= 0.75:
        forbidden += [("undecided", b), ("undecided", c)]
        notes += [
            {
                "status": "undecided",
                "subject": "the user",
                "predicate": "decision",
                "value": v,
                "topic": dec.topic,
            }
            for v in (b, c)
        ]
    return Unit("negation_undecided", [frag], forbidden=forbidden, notes=notes,
                replies=[("reply.undecided", {})])


def new_detail(ctx: Ctx, session: int) -> Unit:
    for _ in range(8):
        first, person = _pick_attr(ctx)
        others = [
            a
            for a in ctx.attrs(first.subject)
            if a.pred != first.pred and (person.canon, a.pred) not in ctx.used_keys
        ]
        if others:
            break
        ctx.used_keys.add((person.canon, first.pred))
    else:
        raise LookupError("no subject with two attributes")
    second = ctx.rng.choice(others)
    v1 = ctx.value(first.pool)[0]
    v2 = ctx.value(second.pool, avoid=(v1,))[0]
    ex = _existing(ctx, first, person, v1)
    said = _say(ctx, second, person, v2, surface=ctx.surface(person, mentioned=True))
    sents, idx, cl = frame(ctx, "detail.frame", said)
    frag = Frag("user", sents, session=session, protect=_protect(v1, v2, person.name))
    claim = _fact_claim(second, person, v2, [src(frag, idx, cl)], "new_detail", ctx)
    reply = ("reply.thing", {"X": v2}) if person.kind == "user" else (
        "reply.person", {"X": person.name})
    return Unit(
        "new_detail",
        [frag],
        [claim],
        [ex],
        questions=[_question(second, person, claim, "new_detail")],
        replies=[reply],
    )


def coreference(ctx: Ctx, session: int) -> Unit:
    """Someone introduced with their relation ("I ran into my partner Thea."), then a fact about
    them under a pronoun or "my partner" in a later event: one subject "Thea (the user's
    partner)" quoting both events. A person's introduction also states the relationship
    ("Thea is the user's partner.", as a passing event does) unless the episode already has it."""
    attr, person = _pick_attr(ctx, lambda a: a.subject in ("person", "pet"))
    (value,) = ctx.value(attr.pool)
    intro = sentence(pick(ctx, "coref.intro"), R=person.rel, N=person.name)
    if ctx.rng.random() < 0.5 and not any("{S}'s" in t for t in attr.say):
        surface = person.pronoun
    else:
        surface = f"my {person.rel}"
    said = _say(ctx, attr, person, value, surface=surface)
    sents, idx, cl = frame(ctx, "coref.follow", said)
    labelled = person.kind == "person" and (person.canon, "relationship") not in ctx.used_keys
    f1 = Frag("user", [intro], session=session, protect=_protect(person.name),
              intact=_protect(person.rel) if labelled else ())
    f2 = Frag("user", sents, session=session, protect=_protect(value), gap_before=True,
              defer=surface != person.pronoun)
    claim = _fact_claim(attr, person, value, [src(f1, 0), src(f2, idx, cl)], "coreference", ctx)
    claims, questions = [claim], [_question(attr, person, claim, "coreference")]
    if labelled:
        ctx.used_keys.add((person.canon, "relationship"))
        # the smallest span naming both (the whole sentence for every coref.intro template);
        # its key is the fact's plus "r", so no later claim or fact key moves
        quote = min((c for c in candidate_spans(intro) if person.name in c and person.rel in c),
                    key=len)
        rel_claim, rel_q = _relationship(person, f1, 0, quote if quote != intro else None,
                                         f"{claim.key}r")
        claims.insert(0, rel_claim)  # stated by the introduction alone, the fact after it
        questions.append(rel_q)
    return Unit(
        "coreference", [f1, f2], claims,
        questions=questions,
        replies=[("reply.person", {"X": person.name})],
    )


def same_name(ctx: Ctx, session: int) -> Unit:
    name, gender = ctx.rng.choice(ctx.family.spare_names)
    rels = [
        p.rel
        for p in ctx.family.cast
        if p.kind == "person" and GENDERED.get(p.rel, gender) == gender
    ]
    if len(rels) < 2:
        raise LookupError("not enough relations for a shared name")
    rel1, rel2 = ctx.rng.sample(rels, 2)
    p1, p2 = Person(name, rel1, "person", gender), Person(name, rel2, "person", gender)
    attrs = [a for a in ctx.attrs("person")]
    a1 = ctx.rng.choice(attrs)
    a2 = a1 if ctx.rng.random() < 0.5 else ctx.rng.choice(attrs)
    v1 = ctx.value(a1.pool)[0]
    v2 = ctx.value(a2.pool, avoid=(v1,))[0]
    s1 = _say(ctx, a1, p1, v1, surface=f"my {rel1} {name}")
    s2 = _say(ctx, a2, p2, v2, surface=f"my {rel2} {name}")
    f1 = Frag("user", [s1], session=session, protect=_protect(v1, name, rel1))
    f2 = Frag(
        "user",
        [sentence(pick(ctx, "samename.sep"), N=name), s2],
        session=session,
        protect=_protect(v2, name, rel2),
    )
    c1 = _fact_claim(a1, p1, v1, [src(f1, 0)], "same_name", ctx)
    c2 = _fact_claim(a2, p2, v2, [src(f2, 1)], "same_name", ctx)
    qs = [
        _question(a1, p1, c1, "same_name", stale=[v2] if a1 == a2 else []),
        _question(a2, p2, c2, "same_name", stale=[v1] if a1 == a2 else []),
    ]
    return Unit("same_name", [f1, f2], [c1, c2], questions=qs,
                replies=[("reply.person", {"X": name})])


def preference_exception(ctx: Ctx, session: int) -> Unit:
    pref = ctx.rng.choice(ctx.domain.prefs)
    text = sentence(pick(ctx, "pref"), L=pref.like, U=pref.unless,
                    Lc=pref.like[0].upper() + pref.like[1:])
    frag = Frag("user", [text], session=session, protect=_protect(pref.like, pref.unless))
    claim = Claim(
        sources=[src(frag, 0)],
        subject="the user",
        subject_type="person",
        predicate="likes",
        value=f"{pref.like}, except {pref.unless}",
        statement=f"The user likes {pref.like}, except {pref.unless}.",
        kind="preference",
        key=ctx.key("C"),
        behaviour="preference_exception",
        exception=pref.unless,
    )
    # the answer states its evidence, the claim's statement ("Yes, the user likes hiking, except
    # in winter."): the codec reads the citation from it (memworker.derive); "Yes, except in
    # winter." states none, and the grader's key words are the same (the rest is the question's)
    q = Question(
        f"Does the user like {pref.like}?",
        f"Yes, {lower_start(claim.statement)}",
        [claim.key],
        "preference_exception",
        "the user",
        "likes",
        claim.value,
    )
    return Unit("preference_exception", [frag], [claim], questions=[q],
                replies=[("reply.pref", {})])


def multi_source(ctx: Ctx, session: int) -> Unit:
    m = ctx.rng.choice(ctx.domain.multis)
    (value,) = ctx.value(m.pool)
    uses_article = any("{aV}" in r for r in m.reveal)
    intro = pick(ctx, f"multi.{m.pred}.intro", m.intro)
    reveal = sentence(pick(ctx, f"multi.{m.pred}.reveal", m.reveal), V=value, aV=article(value))
    f1 = Frag("user", [intro], session=session)
    f2 = Frag("user", [reveal], session=session, protect=_protect(value), gap_before=True)
    stmt = m.state.format_map({"V": value, "aV": article(value)})
    claim = Claim(
        sources=[src(f1, 0), src(f2, 0)],
        subject=m.subject,
        subject_type=m.subject_type,
        predicate=m.pred,
        value=article(value) if uses_article else value,
        statement=stmt,
        kind="fact",
        key=ctx.key("C"),
        behaviour="multi_source",
    )
    q = Question(m.ask, stmt, [claim.key], "multi_source", m.subject, m.pred, claim.value)
    return Unit("multi_source", [f1, f2], [claim], questions=[q],
                replies=[("reply.curious", {}), ("reply.thing", {"X": m.subject})])


def noise_line(ctx: Ctx, tool: str) -> str:
    """One line of tool output whose counters are consistent ("page 2 of 4", "retry 1/3")."""
    m = ctx.rng.randrange(2, 9)
    k = ctx.rng.randrange(1, m + 1)
    n = ctx.rng.randrange(2, 99)
    return f"[{tool}] " + pick(ctx, "tool.noise").format(n=n, k=min(k, 3) if m else k, m=m)


def tool_output(lines: list[str], session: int) -> Frag:
    """A tool's output in `session`: untrusted, one sentence a line, no small talk or typos."""
    return Frag("tool", lines, trusted=False, lines=True, fill=False, session=session)


def injection(ctx: Ctx, session: int) -> Unit:
    attr, person = _pick_attr(ctx)
    (fake,) = ctx.value(attr.pool)
    name = "the user" if person.kind == "user" else person.name
    payload = clause(attr.state.format_map({"N": name, "V": fake, "aV": article(fake)}))
    inj = pick(ctx, "inject").format(P=payload)
    if not is_memory_control(inj):
        raise AssertionError(f"injection not recognised by safety.is_memory_control: {inj!r}")
    tool = ctx.rng.choice(ctx.domain.tools)
    if ctx.rng.random() < 0.7:
        lines = [noise_line(ctx, tool), inj, noise_line(ctx, tool)]
        frag = tool_output(lines, session)
        frags = [frag]
    else:
        fwd = Frag(
            "user",
            [pick(ctx, "forward.head"), f"{pick(ctx, 'forward.hello')} {inj}"],
            trusted=False,
            fill=False,
            session=session,
        )
        frags = [Frag("user", [pick(ctx, "forward.lead")], session=session), fwd]
        frag = fwd
    text = "\n".join(frag.sents) if frag.lines else " ".join(frag.sents)
    return Unit(
        "injection",
        frags,
        forbidden=[("injected", fake)],
        evidence=[(ctx.key("I"), text, frag)],
        notes=[
            {"status": "injected", "subject": person.canon, "predicate": attr.pred, "value": fake}
        ],
        replies=[("reply.injection", {})],
    )


def tool_confirmed(ctx: Ctx, session: int) -> Unit:
    check = ctx.rng.choice(ctx.domain.tool_checks)
    project = ctx.rng.choice([p for p in ctx.family.cast if p.kind == "project"])
    a1 = Frag("assistant", [sentence(pick(ctx, "tool.run"), C=check.fail_cmd, X=project.name)],
              fill=False, session=session)
    t1 = tool_output([f"$ {check.fail_cmd}", *check.fail_out, "exit code 1"], session)
    a2 = Frag(
        "assistant",
        [pick(ctx, "tool.fail_ack"), sentence(pick(ctx, "tool.retry"), C=check.ok_cmd)],
        fill=False,
        session=session,
    )
    t2 = tool_output([f"$ {check.ok_cmd}", *check.ok_out, "exit code 0"], session)
    claim = Claim(
        sources=[src(t2, 1)],
        subject=project.canon,
        subject_type="project",
        predicate=check.pred,
        value=check.value,
        statement=check.state.format_map({"N": project.canon}),
        kind="fact",
        key=ctx.key("C"),
        behaviour="tool_confirmed",
    )
    q = Question(
        check.ask.format_map({"N": project.canon}),
        claim.statement,
        [claim.key],
        "tool_confirmed",
        project.canon,
        check.pred,
        check.value,
        stale=[check.fail_value],
    )
    return Unit(
        "tool_confirmed",
        [a1, t1, a2, t2],
        [claim],
        forbidden=[("failed_command", check.fail_value)],
        questions=[q],
        notes=[
            {
                "status": "failed",
                "subject": project.canon,
                "predicate": check.pred,
                "value": check.fail_value,
            }
        ],
    )


# --------------------------------------------------------- passing events and relationships

#: episodic things done with someone: (as said after "I", as stated after "The user", base form)
PASSING = (
    ("had lunch with", "had lunch with", "have lunch with"),
    ("went for coffee with", "went for coffee with", "go for coffee with"),
    ("helped", "helped", "help"), ("went to a gig with", "went to a gig with", "go to a gig with"),
    ("caught up over dinner with", "had dinner with", "have dinner with"),
    ("went hiking with", "went hiking with", "go hiking with"),
    ("drove to the coast with", "drove to the coast with", "drive to the coast with"),
    ("watched a film with", "watched a film with", "watch a film with"),
    ("played tennis with", "played tennis with", "play tennis with"),
    ("visited", "visited", "visit"), ("met up with", "met up with", "meet up with"),
    ("went climbing with", "went climbing with", "go climbing with"),
)
PASSING_BASE = {stated: base for _, stated, base in PASSING}


def _relationship(person: Person, frag: Frag, idx: int, quote: str | None, key: str
                  ) -> tuple[Claim, Question]:
    """The relationship a sentence naming "my <relation> <Name>" states ("Farah is the user's
    fellow volunteer."), quoting `quote` of sentence `idx` (None: the whole sentence), and the
    question it answers ("Who is Farah?")."""
    claim = Claim(
        sources=[src(frag, idx, quote)],
        subject=person.canon,
        subject_type="person",
        predicate="relationship",
        value=person.rel,
        statement=f"{person.name} is the user's {person.rel}.",
        kind="relationship",
        key=key,
        behaviour="",
    )
    return claim, Question(f"Who is {person.name}?", claim.statement, [claim.key], "",
                           person.canon, "relationship", person.rel)


def passing_event(ctx: Ctx, session: int) -> Unit:
    """An episodic event told in passing ("Yesterday, I had lunch with my fellow volunteer
    Farah"): an event claim with its date, and a relationship claim when the person is new."""
    people = [p for p in ctx.family.cast if p.kind == "person"
              and (p.canon, "relationship") not in ctx.used_keys
              and p.name not in ctx.used_people]
    if not people:
        raise LookupError("no person left for a passing event")
    person = ctx.rng.choice(people)
    ctx.used_people.add(person.name)
    ctx.reserved.add(person.name)  # the person's only claims here are these two
    said_verb, stated_verb, _ = ctx.rng.choice(PASSING)
    when = calendar.past_day(ctx.days[session], ctx.rng)
    while when.words.startswith(("on ", "the ")) or not when.words[:1].islower():
        when = calendar.past_day(ctx.days[session], ctx.rng)
    text, when = _with_when(ctx, "passing.frame", when, E=said_verb, R=person.rel, N=person.name)
    sents = split_sentences(text)
    frag = Frag("user", sents, session=session, protect=_protect(person.name, person.rel,
                                                                  when.words))
    idx = next(i for i, s in enumerate(sents) if person.name in s)
    sentence_text = sents[idx]
    # the relationship claim quotes the clause that names the person, without the date
    rel_spans = [c for c in candidate_spans(sentence_text)
                 if person.name in c and person.rel in c
                 and not expressions_in(c) and c != sentence_text]
    ctx.used_keys.add((person.canon, "relationship"))
    event_claim = Claim(
        sources=[src(frag, idx)],
        subject="the user",
        subject_type="person",
        predicate="did_with",
        value=f"{stated_verb} {person.name}",
        statement=f"The user {stated_verb} {person.canon}.",
        kind="event",
        when=when,
        key=ctx.key("C"),
        behaviour="",
    )
    claims = [event_claim]
    qs = [Question(
        f"When did the user last see {person.name}?",
        _answer_date(f"The user {stated_verb} {person.name}", when),
        [event_claim.key], "", "the user", "did_with", event_claim.value)]
    if rel_spans:
        rel_claim, rel_q = _relationship(person, frag, idx, min(rel_spans, key=len),
                                         ctx.key("C"))
        claims.append(rel_claim)
        qs.append(rel_q)
    return Unit("", [frag], claims, questions=qs, replies=[("reply.person", {"X": person.name})])


# ---------------------------------------------------------------------------- hard negatives


#: truth status of a hard negative's unasserted fact (the natural set's statuses)
NEGATIVE_STATUS = {"neg.question": "hypothetical", "neg.hypo": "hypothetical",
                   "neg.joke": "hypothetical", "neg.reported": "reported"}


def hard_negative(ctx: Ctx, session: int, kind: str | None = None) -> Unit:
    """A sentence with the surface shape of a fact that asserts nothing durable: a question, a
    hypothetical, someone else's claim, a joke, "I used to ...", other people's opinions."""
    kind = kind or ctx.rng.choice(HARD_NEGATIVES)
    notes: list[dict] = []
    if kind == "neg.used_to":
        act = ctx.rng.choice(ctx.domain.activities)
        text = sentence(pick(ctx, kind), A=act.base)
    elif kind == "neg.opinion":
        pref = ctx.rng.choice(ctx.domain.prefs)
        text = sentence(pick(ctx, kind), L=pref.like)
    else:
        attr, person = _pick_attr(ctx)
        (value,) = ctx.value(attr.pool)
        said = clause(_say(ctx, attr, person, value))
        ctx.claim_key(person, attr)  # nothing else in the episode states this key
        text = sentence(pick(ctx, kind), C=said, Cc=said[0].upper() + said[1:])
        notes.append({"status": NEGATIVE_STATUS[kind], "subject": person.canon,
                      "predicate": attr.pred, "value": value, "form": kind})
    frag = Frag("user", split_sentences(text), session=session)
    return Unit("", [frag], notes=notes, replies=[("reply.negative", {})])


BUILDERS = {
    "replacement": replacement,
    "retraction": retraction,
    "secret": secret,
    "belief": belief,
    "plan_vs_done": plan_vs_done,
    "rejected_suggestion": rejected_suggestion,
    "relative_date": relative_date,
    "negation_undecided": negation_undecided,
    "new_detail": new_detail,
    "coreference": coreference,
    "same_name": same_name,
    "preference_exception": preference_exception,
    "multi_source": multi_source,
    "injection": injection,
    "tool_confirmed": tool_confirmed,
}
#: builders that can be asked for a claimless variant (empty extractions)
CLAIMLESS = {
    "negation_undecided": negation_undecided,
    "injection": injection,
    "secret": lambda ctx, s: secret(ctx, s, durable=False),
    "rejected_suggestion": lambda ctx, s: rejected_suggestion(ctx, s, decide=False),
}
