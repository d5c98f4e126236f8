"""The generator's tables, read from the YAML files in `tables/` beside this module.

The value pools (`pools.yaml`), the 16 general domains (`general.yaml`), the coding domain
(`coding.yaml`) and the surface templates (`templates.yaml`) are data: each file has a top-level
`version` (this code reads version 1) and is read once per process. The loader checks each entry
against the shapes of memworker.corpus.spec (required and unknown fields, strings, booleans,
lists) and that every pool a domain names exists, and returns what the generator used when the
tables were Python: tuples, not lists, and dicts in file order. A missing or malformed table
raises TableError, the reason first, then the file and the key ("expected a non-empty string,
got 3: .../templates.yaml, key templates.story[2]").

Two short forms in the domain files: an `attrs` entry that is a plain string names an attribute
of `shared_attrs`, and a chit-chat entry is `{user: question, assistant: answer}`. The coding
domain's `projects_pool` names the pool its repository names come from.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from pathlib import Path
from typing import Any

import yaml

from memworker.corpus.spec import Attr, Domain

TABLES = Path(__file__).with_name("tables")
VERSION = 1
Phrases = dict[str, tuple[str, ...]]
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 10x faster


class TableError(ValueError):
    """A corpus table is missing or malformed; the message gives the reason, the file, the key."""


def _fail(reason: str, path: Path, key: str = "") -> TableError:
    return TableError(f"{reason}: {path}" + (f", key {key}" if key else ""))


@functools.cache
def document(path: Path) -> dict[str, Any]:
    """One table file, parsed and its version checked (read once per process)."""
    try:
        doc = yaml.load(path.read_text("utf-8"), Loader=_LOADER)
    except FileNotFoundError:
        raise _fail("table file is missing", path) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise _fail(f"not valid YAML, {getattr(exc, 'problem', None) or exc}{at}", path) from None
    if not isinstance(doc, dict):
        raise _fail(f"expected a mapping at the top, got {type(doc).__name__}", path)
    if doc.get("version") != VERSION:
        raise _fail(f"unsupported version {doc.get('version')!r} (this code reads version "
                    f"{VERSION})", path, "version")
    return doc


def _section(path: Path, key: str) -> Any:
    doc = document(path)
    if key not in doc:
        raise _fail("missing table", path, key)
    return doc[key]


def convert(value: Any, tp: Any, path: Path, key: str) -> Any:
    """`value` read from YAML as type `tp` (str, bool, a spec dataclass, tuple[...], dict[str, ...])."""
    if dataclasses.is_dataclass(tp):
        return value if isinstance(value, tp) else _record(tp, value, path, key)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise _fail(f"expected a list, got {type(value).__name__}", path, key)
        types = [args[0]] * len(value) if args[-1] is Ellipsis else list(args)
        if len(types) != len(value):
            raise _fail(f"expected a list of {len(types)} items, got {len(value)}", path, key)
        return tuple(convert(v, t, path, f"{key}[{i}]")
                     for i, (v, t) in enumerate(zip(value, types, strict=True)))
    if origin is dict:
        if not isinstance(value, dict):
            raise _fail(f"expected a mapping, got {type(value).__name__}", path, key)
        for k in value:
            if not isinstance(k, str):
                raise _fail(f"expected a string key, got {k!r}", path, key)
        return {k: convert(v, args[1], path, f"{key}.{k}") for k, v in value.items()}
    if type(value) is not tp or value == "":
        what = "a non-empty string" if tp is str else tp.__name__
        raise _fail(f"expected {what}, got {value!r}", path, key)
    return value


def _record(cls: type, value: Any, path: Path, key: str) -> Any:
    if not isinstance(value, dict):
        raise _fail(f"expected a mapping ({cls.__name__}), got {type(value).__name__}", path, key)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in value:
        if name not in fields:
            raise _fail(f"unknown field {name!r} of {cls.__name__}", path, f"{key}.{name}")
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and name not in value:
            raise _fail(f"missing field {name!r} of {cls.__name__}", path, f"{key}.{name}")
    hints = typing.get_type_hints(cls)
    return cls(**{k: convert(v, hints[k], path, f"{key}.{k}") for k, v in value.items()})


@dataclasses.dataclass(frozen=True)
class _Chat:
    user: str
    assistant: str


def _domain(entry: Any, shared: dict[str, Attr], pools: Phrases, path: Path, key: str) -> Domain:
    """A domain entry, its short forms expanded, every pool it names checked."""
    if not isinstance(entry, dict):
        raise _fail(f"expected a mapping (Domain), got {type(entry).__name__}", path, key)
    entry = dict(entry)
    attrs = entry.get("attrs", [])
    if isinstance(attrs, list):
        for i, a in enumerate(attrs):
            if isinstance(a, str) and a not in shared:
                raise _fail(f"unknown shared attribute {a!r} (shared_attrs has "
                            f"{sorted(shared)})", path, f"{key}.attrs[{i}]")
        entry["attrs"] = [shared[a] if isinstance(a, str) else a for a in attrs]
    if "chitchat" in entry:
        chats = convert(entry["chitchat"], tuple[_Chat, ...], path, f"{key}.chitchat")
        entry["chitchat"] = [(c.user, c.assistant) for c in chats]
    if "projects_pool" in entry:
        name = entry.pop("projects_pool")
        if not isinstance(name, str) or name not in pools:
            raise _fail(f"unknown pool {name!r}", path, f"{key}.projects_pool")
        entry["projects"] = pools[name]
    domain = convert(entry, Domain, path, key)
    for part in ("attrs", "decisions", "multis"):
        for i, item in enumerate(getattr(domain, part)):
            if item.pool not in pools and item.pool not in domain.pools:
                raise _fail(f"unknown pool {item.pool!r}", path, f"{key}.{part}[{i}].pool")
    return domain


@functools.cache
def value_pools(folder: Path = TABLES) -> Phrases:
    """The shared value pools (pools.yaml), name -> values."""
    path = folder / "pools.yaml"
    return convert(_section(path, "pools"), Phrases, path, "pools")


@functools.cache
def general_domains(folder: Path = TABLES) -> tuple[Domain, ...]:
    """The 16 general domains (general.yaml) in file order."""
    path, pools = folder / "general.yaml", value_pools(folder)
    shared = convert(_section(path, "shared_attrs"), dict[str, Attr], path, "shared_attrs")
    entries = _section(path, "domains")
    if not isinstance(entries, list):
        raise _fail(f"expected a list, got {type(entries).__name__}", path, "domains")
    return tuple(_domain(e, shared, pools, path, f"domains[{i}]") for i, e in enumerate(entries))


@functools.cache
def coding_domain(folder: Path = TABLES) -> tuple[Phrases, Domain]:
    """The coding domain's own pools and the domain (coding.yaml)."""
    path = folder / "coding.yaml"
    own = convert(_section(path, "pools"), Phrases, path, "pools")
    pools = {**value_pools(folder), **own}
    return own, _domain(_section(path, "domain"), {}, pools, path, "domain")


@functools.cache
def templates(folder: Path = TABLES) -> tuple[Phrases, Phrases]:
    """The surface template lists and the consolidation themes (templates.yaml)."""
    path = folder / "templates.yaml"
    return (convert(_section(path, "templates"), Phrases, path, "templates"),
            convert(_section(path, "obs_theme"), Phrases, path, "obs_theme"))


def voice(folder: Path = TABLES) -> tuple[tuple[str, ...], tuple[str, ...],
                                          tuple[tuple[str, str], ...]]:
    """The re-voiced generator's casual register (voice.yaml): (fillers, emoji, shortenings as
    (phrase, casual form) pairs). Read only by `memworker.corpus.voice`."""
    path = folder / "voice.yaml"
    fillers = convert(_section(path, "fillers"), tuple[str, ...], path, "fillers")
    emoji = convert(_section(path, "emoji"), tuple[str, ...], path, "emoji")
    pairs = _section(path, "shortenings")
    if not isinstance(pairs, list):
        raise _fail(f"expected a list, got {type(pairs).__name__}", path, "shortenings")
    short = []
    for i, p in enumerate(pairs):
        if not (isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) and s for s in p)):
            raise _fail(f"expected [phrase, casual form], got {p!r}", path, f"shortenings[{i}]")
        short.append((p[0], p[1]))
    return fillers, emoji, tuple(short)
