"""The shapes of a domain's content: attributes, dated items, activities, preferences, ...

A domain is plain data in these shapes (tables/general.yaml and tables/coding.yaml, read by
memworker.corpus.tables); the behaviours (memworker.corpus.behaviours) turn it into events and
gold labels. Template fields:

    {S}   subject as said in the event ("my sister Ana", "Ana", "she")
    {N}   canonical subject name ("Ana (the user's sister)", "the user")
    {V}   value, {aV} value with "a"/"an", {O} old value, {W} time expression as said
    {B}   believer as said, {BN} believer's canonical name

User-subject templates are in the first person ("I work at {V}."); the others in the third person.
Statements never contain a date or a time expression (the date is its own field).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Attr:
    """A durable attribute of a subject (the user, a person, a pet, a project)."""

    pred: str
    subject: str  # "user" | "person" | "pet" | "project"
    pool: str  # value pool name (domain pools first, then shared pools)
    say: tuple[str, ...]  # how the user says it
    state: str  # canonical statement
    ask: str  # a question about it
    topic: str  # noun phrase for "the evidence does not mention {N}'s {topic}"
    kind: str = "fact"  # fact | preference | relationship
    stop: tuple[str, ...] = ()  # retraction phrasings ({V} = the value that ends)
    stop_state: str = ""  # canonical retraction statement
    suggest: bool = False  # an assistant may suggest another value (rejected-suggestion)


@dataclass(frozen=True)
class Dated:
    """Something with a date (appointment, deadline, trip) - the relative-date behaviour."""

    pred: str
    value: str  # "dentist appointment"


@dataclass(frozen=True)
class Activity:
    """Something the user plans or did: base form and past form."""

    base: str  # "repaint the kitchen"
    past: str  # "repainted the kitchen"


@dataclass(frozen=True)
class Pref:
    """A preference with an important exception."""

    like: str  # "spicy food"
    unless: str  # "Thai curries"


@dataclass(frozen=True)
class Decision:
    """A choice among options: one ruled out, two still open (negation and undecided)."""

    topic: str  # "a new gym"
    pool: str


@dataclass(frozen=True)
class Multi:
    """A fact split over two events: one names the subject, the next gives the value."""

    subject: str  # canonical subject name ("the family reunion")
    subject_type: str
    pred: str
    pool: str
    intro: tuple[str, ...]
    reveal: tuple[str, ...]  # with {V}
    state: str  # with {V}
    ask: str
    topic: str


@dataclass(frozen=True)
class Pair:
    """Two facts about one person that together suggest a hedged observation."""

    a: str  # with {N}
    b: str
    obs: str  # hedged
    subject: str = "person"  # "person" | "user"


@dataclass(frozen=True)
class ToolCheck:
    """Coding: a command that failed and one that the tool confirmed."""

    fail_cmd: str
    fail_out: tuple[str, ...]
    ok_cmd: str
    ok_out: tuple[str, ...]  # the first line is what the claim quotes
    pred: str
    value: str
    state: str  # with {N} (the project)
    fail_value: str  # what the failed command would have claimed
    ask: str  # a question the confirmed result answers, with {N}


@dataclass(frozen=True)
class Domain:
    key: str
    title: str
    relations: tuple[str, ...]  # people around the user in this domain ("sister", "coworker")
    pets: tuple[str, ...] = ()  # species, when the domain has pets
    attrs: tuple[Attr, ...] = ()
    dated: tuple[Dated, ...] = ()
    activities: tuple[Activity, ...] = ()
    prefs: tuple[Pref, ...] = ()
    decisions: tuple[Decision, ...] = ()
    multis: tuple[Multi, ...] = ()
    pairs: tuple[Pair, ...] = ()
    accounts: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    smalltalk: tuple[str, ...] = ()
    chitchat: tuple[tuple[str, str], ...] = ()  # (user question, assistant answer): not durable
    pools: dict[str, tuple[str, ...]] = field(default_factory=dict)
    tool_checks: tuple[ToolCheck, ...] = ()
    projects: tuple[str, ...] = ()  # coding: repository names
