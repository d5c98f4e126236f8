"""Task contracts: the JSON Schemas of every task's input, canonical output and wire form (what
the model generates, `memworker.wire`).

The schema files live in `memworker/schemas/` and are the source of truth. They stay inside what
llama.cpp's JSON-schema -> grammar conversion supports: flat objects, `anyOf` only of whole objects,
anchored patterns, bounded strings and arrays (tests/test_contracts.py proves each converts).

    >>> from memworker.contracts import validate
    >>> validate("consolidate_output", {"observations": []})
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

from memworker import temporal

TASKS = ("extract", "consolidate", "reflect")

#: task -> (input schema name, canonical output schema name)
TASK_SCHEMAS = {
    "extract": ("episode", "extract_output"),
    "consolidate": ("consolidate_input", "consolidate_output"),
    "reflect": ("reflect_input", "reflect_output"),
}

SCHEMA_NAMES = (
    "episode",
    "extract_output",
    "extract_wire",
    "consolidate_input",
    "consolidate_output",
    "consolidate_wire",
    "reflect_input",
    "reflect_output",
    "reflect_wire",
)


#: input contract -> its timestamp fields: (path, partial) with "*" for every item of a list;
#: partial: a date at year/month/day precision is allowed too (a fact's valid_from)
TIMESTAMP_FIELDS: dict[str, tuple[tuple[tuple[str, ...], bool], ...]] = {
    "episode": ((("events", "*", "timestamp"), False), (("existing_facts", "*", "valid_from"), True)),
    "reflect_input": ((("asked_at",), False), (("evidence", "*", "timestamp"), False)),
}


class ContractError(ValueError):
    """A document does not satisfy its task contract. `errors` lists every violation."""

    def __init__(self, schema: str, errors: list[str]):
        self.schema = schema
        self.errors = errors
        shown = "; ".join(errors[:5]) + (f"; … ({len(errors) - 5} more)" if len(errors) > 5 else "")
        super().__init__(f"{schema}: {shown}")


@cache
def _load(name: str) -> str:
    if name not in SCHEMA_NAMES:
        raise KeyError(f"unknown schema {name!r}; known: {', '.join(SCHEMA_NAMES)}")
    return resources.files("memworker.schemas").joinpath(f"{name}.schema.json").read_text("utf-8")


def load_schema(name: str) -> dict[str, Any]:
    """Return a fresh copy of the named schema (callers may mutate it)."""
    return json.loads(_load(name))


@cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = load_schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def errors(name: str, doc: Any) -> list[str]:
    """Every violation of schema `name` by `doc`, as 'path: message' strings (empty when valid),
    including timestamps that match the schema's pattern but are not real date-times
    (`timestamp_errors`)."""
    found = sorted(_validator(name).iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    out = [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {reason(e)}" for e in found]
    flagged = {"/".join(map(str, e.absolute_path)) for e in found}
    return out + [e for where, e in timestamp_errors(name, doc) if where not in flagged]


#: an offending value longer than this is shown after the reason, cut, not before it
SHOWN_VALUE = 60


def reason(error: Any) -> str:
    """A jsonschema error's message with the reason first: jsonschema starts with the offending
    value's repr ("{'claims': …} is not of type 'array'"), which hides the reason once the
    value is long and the message is cut (issue 46). A long value moves after the reason,
    shortened: "is not of type 'array' (got dict, 347 chars: {'claims': [{'quot…)"."""
    message, shown = error.message, repr(error.instance)
    if len(shown) <= SHOWN_VALUE or not message.startswith(shown):
        return message
    rest = message[len(shown):].strip()
    return (f"{rest} (got {type(error.instance).__name__}, {len(shown)} chars: "
            f"{shown[:SHOWN_VALUE - 20]}…)")


def _values_at(doc: Any, path: tuple[str, ...], prefix: tuple[str, ...] = ()):
    if not path:
        yield "/".join(prefix), doc
    elif path[0] == "*":
        if isinstance(doc, list):
            for i, item in enumerate(doc):
                yield from _values_at(item, path[1:], (*prefix, str(i)))
    elif isinstance(doc, dict) and path[0] in doc:
        yield from _values_at(doc[path[0]], path[1:], (*prefix, path[0]))


def timestamp_errors(name: str, doc: Any) -> list[tuple[str, str]]:
    """(path, message) for every timestamp field of input contract `name` whose text is not a
    real date-time with a UTC offset (`memworker.temporal.parse_timestamp`; a partial date for
    valid_from), e.g. `2025-13-45T99:00:00Z` or `2024-02-30T10:00:00Z`."""
    out = []
    for path, partial in TIMESTAMP_FIELDS.get(name, ()):
        for where, value in _values_at(doc, path):
            if not isinstance(value, str):
                continue  # the schema reports wrong types
            try:
                if partial:
                    temporal.check_partial_date(value, where)
                else:
                    temporal.parse_timestamp(value, where)
            except ValueError as exc:
                out.append((where, str(exc)))
    return out


def validate(name: str, doc: Any) -> None:
    """Raise ContractError listing every violation when `doc` does not satisfy schema `name`."""
    problems = errors(name, doc)
    if problems:
        raise ContractError(name, problems)


def validate_input(task: str, doc: Any) -> None:
    validate(TASK_SCHEMAS[_task(task)][0], doc)


def validate_output(task: str, doc: Any) -> None:
    validate(TASK_SCHEMAS[_task(task)][1], doc)


def _task(task: str) -> str:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    return task
