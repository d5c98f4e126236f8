"""World state: families (scenario template + private pools) and the per-episode context.

A family fixes a domain, a cast (names from its split's own name pool, with relations), a
private subset of every value pool, a UTC offset and a phrasing style. An episode samples a world
state from its family through `Ctx`: who is involved, which values hold, which dates, and which
facts the store already has. Everything is drawn from a `random.Random` seeded by sha256 of
(seed, family/episode id), so generation is order-independent and identical on any machine.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from memworker.corpus.pools import names_for_split
from memworker.corpus.spec import Attr, Domain
from memworker.hashing import sha256_parts

#: relations that fix a person's gender (so names and pronouns agree)
GENDERED = {r: "f" for r in ("sister", "mom", "grandmother", "aunt", "niece", "daughter")}
GENDERED.update({r: "m" for r in ("brother", "dad", "grandfather", "uncle", "nephew", "son")})
OFFSETS = ("+00:00", "Z", "+01:00", "+02:00", "+05:30", "+09:00", "-03:00", "-05:00", "-08:00")
FIRST_DAY = date(2024, 1, 8)
DAY_SPAN = 1000  # episodes start between FIRST_DAY and FIRST_DAY + DAY_SPAN days


def rng_for(*parts: object) -> random.Random:
    """A private random stream for the given identity (never Python's salted hash())."""
    return random.Random(int.from_bytes(sha256_parts(*parts)[:16], "big"))


def article(value: str) -> str:
    return f"{'an' if value[:1].lower() in 'aeiou' else 'a'} {value}"


_CAP_WORDS = {"my", "the", "she", "he", "it", "they", "a", "an"}


def sentence(template: str, **fields: str) -> str:
    """Fill a template; capitalise the first letter when the sentence starts with a common word
    ("my sister Ana ..." -> "My sister Ana ..."), never a name or a value like "pnpm"."""
    text = template.format_map(fields)
    first = text.split(" ", 1)[0]
    if first in _CAP_WORDS:
        text = text[0].upper() + text[1:]
    return text


def lower_start(text: str) -> str:
    """`text` with its first letter lower-cased when it starts with a common word ("My sister"
    -> "my sister"), never a name or "I"."""
    first = text.split(" ", 1)[0]
    if first.lower() in _CAP_WORDS and first[:1].isupper():
        return text[0].lower() + text[1:]
    return text


def third_person(text: str) -> str:
    """An activity as the store states it: "renew my passport" -> "renew their passport"."""
    return re.sub(r"\b(?:my|our)\b", "their", text)


def clause(sentence_text: str) -> str:
    """A sentence without its final punctuation, lower-cased at the start when that is a common
    word ("The user works at X." -> "the user works at X")."""
    text = sentence_text.rstrip(".!?")
    first = text.split(" ", 1)[0]
    if first.lower() in _CAP_WORDS and first[:1].isupper():
        text = text[0].lower() + text[1:]
    return text


@dataclass(frozen=True)
class Person:
    """Someone (or a pet, or a project) the user talks about."""

    name: str
    rel: str  # "sister", "dog", "project"
    kind: str  # "person" | "pet" | "project"
    gender: str = "f"  # "f" | "m" | "n"

    @property
    def canon(self) -> str:
        if self.kind == "user":
            return "the user"
        if self.kind == "project":
            return self.name
        return f"{self.name} (the user's {self.rel})"

    @property
    def subject_type(self) -> str:
        return {"person": "person", "pet": "pet", "project": "project"}[self.kind]

    @property
    def pronoun(self) -> str:
        return {"f": "she", "m": "he"}.get(self.gender, "it")

    def surfaces(self) -> list[str]:
        """Ways the user refers to this subject on first mention."""
        if self.kind == "project":
            return [f"the {self.name} repo", self.name]
        return [f"my {self.rel} {self.name}", f"{self.name} (my {self.rel})"]


USER = Person("the user", "self", "user", "n")


@dataclass
class Family:
    id: str
    domain: Domain
    split: str
    cast: list[Person]
    pools: dict[str, tuple[str, ...]]
    offset: str
    spare_names: list[tuple[str, str]]  # (name, gender) for same-name pairs
    chatty: float  # how much small talk this family's episodes carry
    typo_rate: float


def make_family(family_id: str, domain: Domain, split: str, seed: int,
                pools: dict[str, tuple[str, ...]]) -> Family:
    rng = rng_for("family", seed, family_id)
    names = names_for_split(split)
    people = [(n, "f") for n in names["female"]] + [(n, "m") for n in names["male"]]
    people.sort()
    rng.shuffle(people)
    cast: list[Person] = []
    for rel in domain.relations:
        need = GENDERED.get(rel)
        i = next(i for i, (_, g) in enumerate(people) if need is None or g == need)
        name, gender = people.pop(i)
        cast.append(Person(name, rel, "person", gender))
    spare = people[:6]
    pet_names = list(names["pet"])
    rng.shuffle(pet_names)
    for i, species in enumerate(domain.pets):
        cast.append(Person(pet_names[i], species, "pet", rng.choice("fm")))
    for repo in rng.sample(list(domain.projects), min(3, len(domain.projects))):
        cast.append(Person(repo, "project", "project", "n"))
    private = {}
    for key in sorted(pools):
        values = list(pools[key])
        k = max(4, (len(values) * 7 + 9) // 10) if len(values) > 4 else len(values)
        private[key] = tuple(sorted(rng.sample(values, k)))
    return Family(family_id, domain, split, cast, private, rng.choice(OFFSETS), spare,
                  chatty=rng.uniform(0.2, 0.6), typo_rate=rng.uniform(0.05, 0.2))


@dataclass
class Ctx:
    """What one episode has drawn so far: used subjects, values, existing facts, session days."""

    rng: random.Random
    family: Family
    days: list[date]
    used_values: set[str] = field(default_factory=set)
    used_keys: set[tuple[str, str]] = field(default_factory=set)  # (subject, predicate)
    used_people: set[str] = field(default_factory=set)
    reserved: set[str] = field(default_factory=set)  # people no other unit may talk about
    counter: int = 0

    @property
    def domain(self) -> Domain:
        return self.family.domain

    def key(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def value(self, pool: str, n: int = 1, avoid: tuple[str, ...] = ()) -> list[str]:
        """n distinct values from the family's private pool, unused in this episode."""
        values = [v for v in self.family.pools[pool] if v not in self.used_values
                  and v not in avoid]
        if len(values) < n:
            raise LookupError(f"pool {pool!r} has fewer than {n} unused values")
        picked = self.rng.sample(values, n)
        self.used_values.update(picked)
        return picked

    def subject_for(self, attr: Attr, exclude: tuple[str, ...] = ()) -> Person:
        """A subject of the attribute's kind that has no fact for this predicate yet."""
        if attr.subject == "user":
            return USER
        kind = attr.subject
        cands = [p for p in self.family.cast if p.kind == kind and p.name not in exclude
                 and p.name not in self.reserved and (p.canon, attr.pred) not in self.used_keys]
        fresh = [p for p in cands if p.name not in self.used_people]
        pool = fresh or cands
        if not pool:
            raise LookupError(f"no free {kind} subject for {attr.pred}")
        person = self.rng.choice(pool)
        self.used_people.add(person.name)
        return person

    def claim_key(self, person: Person, attr: Attr) -> None:
        self.used_keys.add((person.canon, attr.pred))

    def attrs(self, subject: str | None = None, need=None) -> list[Attr]:
        out = []
        for a in self.domain.attrs:
            if subject is not None and a.subject != subject:
                continue
            if need is not None and not need(a):
                continue
            if a.subject != "user" and not any(p.kind == a.subject for p in self.family.cast):
                continue
            if a.subject == "user" and ("the user", a.pred) in self.used_keys:
                continue
            out.append(a)
        return out

    def valid_from(self) -> str:
        return (self.days[0] - timedelta(days=self.rng.randrange(20, 400))).isoformat()

    def surface(self, person: Person, mentioned: bool = False) -> str:
        if person.kind == "user":
            return "I"
        if mentioned and self.rng.random() < 0.6:
            return person.name
        return self.rng.choice(person.surfaces())


_WORD = re.compile(r"[A-Za-z]{4,}")


def typo(text: str, rng: random.Random, protect: tuple[str, ...]) -> str:
    """`text` with one plausible typo in a word that overlaps none of the protected substrings;
    unchanged when no word qualifies."""
    spans = []
    for p in protect:
        if not p:
            continue
        start = text.find(p)
        while start != -1:
            spans.append((start, start + len(p)))
            start = text.find(p, start + 1)
    words = [m for m in _WORD.finditer(text)
             if not any(s < m.end() and m.start() < e for s, e in spans)]
    if not words:
        return text
    m = rng.choice(words)
    w = m.group(0)
    i = rng.randrange(1, len(w) - 1)
    kind = rng.choice(("swap", "drop", "double"))
    if kind == "swap":
        new = w[:i] + w[i + 1] + w[i] + w[i + 2:]
    elif kind == "drop":
        new = w[:i] + w[i + 1:]
    else:
        new = w[:i] + w[i] + w[i:]
    return text[:m.start()] + new + text[m.end():]


def session_start(day: date, rng: random.Random) -> datetime:
    """Local wall time a session starts (7:00-19:59; sessions never cross midnight)."""
    hour = rng.randrange(7, 20)
    return datetime(day.year, day.month, day.day, hour, rng.randrange(60), rng.randrange(60))


def iso(dt: datetime, offset: str) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + offset
