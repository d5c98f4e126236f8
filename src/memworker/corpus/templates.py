"""Every surface template of the generator, in one registry with stable ids, and the template split.

A template list has a key ("belief.frame", "attr.lives_in.person.say", ...); a template's id is
"<key>#<sha256 prefix of its text>", stable under reordering. For each list with two or more
options about `HOLDOUT_SHARE` of the templates are held out (chosen by sha256 of (list key,
template); at least one held out and at least one kept): families of the train split say only the
kept ones, val and test families only the held-out ones, so a test sentence's skeleton (names,
values and dates masked) is new to a model trained on train. The family's split is decided in
`memworker.corpus.build.plan` before anything is generated, and reaches `pick` through the
episode's context. Lists of one template are used by every split (the registry reports them, and
event text avoids them). The lists are data: `tables/templates.yaml` beside this module (T and the
consolidation themes OBS_THEME), loaded and checked by memworker.corpus.tables.

Fields: {S} subject as said, {N} canonical name, {V}/{aV} value (with article), {O} old value,
{W}/{Wc} time expression (capitalised), {B} believer as said, {C} a clause, {P} a pronoun, {A}
activity, {L}/{U} liked thing and its exception, {T} topic, {X} a name or thing, {R} relation.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from memworker.corpus import tables
from memworker.hashing import sha256_parts

HOLDOUT_SHARE = 0.3
T: dict[str, tuple[str, ...]]  # list key -> templates (tables/templates.yaml)
OBS_THEME: dict[str, tuple[str, ...]]  # consolidation theme -> observation phrasings
T, OBS_THEME = tables.templates()


def _h(key: str, template: str) -> float:
    return int.from_bytes(sha256_parts("template-split", key, template)[:8], "big") / 2**64


def template_id(key: str, template: str) -> str:
    return f"{key}#{sha256_parts(key, template).hex()[:10]}"


@cache
def held_out(key: str, options: tuple[str, ...]) -> frozenset[str]:
    """The templates of `options` reserved for val/test (empty for a one-template list)."""
    uniq = sorted(set(options))
    if len(uniq) < 2:
        return frozenset()
    ranked = sorted(uniq, key=lambda t: (_h(key, t), t))
    held = {t for t in uniq if _h(key, t) < HOLDOUT_SHARE}
    if not held:
        held = {ranked[0]}
    if len(held) == len(uniq):
        held.discard(ranked[-1])
    return frozenset(held)


def allowed(key: str, options: tuple[str, ...], split: str) -> tuple[str, ...]:
    """The options a family of `split` may say (train: kept; val/test: held out)."""
    held = held_out(key, tuple(options))
    if not held:
        return tuple(options)
    if split == "train":
        return tuple(t for t in options if t not in held)
    return tuple(t for t in options if t in held)


def pick(ctx: Any, key: str, options: tuple[str, ...] | None = None) -> Any:
    """One template of list `key` (T[key] unless `options` given) for the episode's split."""
    opts = T[key] if options is None else tuple(options)
    return ctx.rng.choice(allowed(key, opts, ctx.family.split))


def pick_pair(ctx: Any, key: str, pairs: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    """A (question, answer) pair of chit-chat, split by the pair's text."""
    joined = tuple(f"{q}\u241e{a}" for q, a in pairs)
    q, a = pick(ctx, key, joined).split("\u241e")
    return q, a


def registry() -> dict[str, tuple[str, ...]]:
    """Every template list the generator uses: T plus the domains' (attribute phrasings, two-event
    facts, small talk, chit-chat), keyed as `pick` is called."""
    from memworker.corpus.coding import CODING
    from memworker.corpus.domains import GENERAL

    out: dict[str, set[str]] = {k: set(v) for k, v in T.items()}
    for d in (*GENERAL, CODING):
        for a in d.attrs:
            out.setdefault(attr_key(a), set()).update(a.say)
            if a.stop:
                out.setdefault(attr_key(a, "stop"), set()).update(a.stop)
        for m in d.multis:
            out.setdefault(f"multi.{m.pred}.intro", set()).update(m.intro)
            out.setdefault(f"multi.{m.pred}.reveal", set()).update(m.reveal)
        if d.smalltalk:
            out.setdefault(f"smalltalk.{d.key}", set()).update(d.smalltalk)
        if d.chitchat:
            out.setdefault(f"chitchat.{d.key}", set()).update(
                f"{q}\u241e{a}" for q, a in d.chitchat)
    for theme, opts in OBS_THEME.items():
        out.setdefault(f"obs.theme.{theme}", set()).update(opts)
    return {k: tuple(sorted(v)) for k, v in sorted(out.items())}


def attr_key(attr: Any, part: str = "say") -> str:
    return f"attr.{attr.pred}.{attr.subject}.{part}"


def split_report() -> dict[str, int]:
    """Counts for the manifest/README: lists, templates, held out, single-template lists."""
    reg = registry()
    return {"lists": len(reg), "templates": sum(len(v) for v in reg.values()),
            "held_out": sum(len(held_out(k, v)) for k, v in reg.items()),
            "single_template_lists": sum(1 for v in reg.values() if len(v) < 2)}

