"""JSON Schema -> GBNF for exactly the schema subset memworker uses (our own, small converter).

Why not llama-cpp-python's converter: it lets raw control characters into strings, and about half
of the sampled outputs then fail to parse (docs FACTS.md, "Grammar bug"). This converter is
strict by construction:

- **Strings** never contain a raw `"`, `\\`, `\\x00-\\x1F` or `\\x7F`. The only escapes are the
  ones `json.dumps` writes: `\\"`, `\\\\`, `\\b`, `\\f`, `\\n`, `\\r`, `\\t` and `\\u00XX` (lowercase
  hex, for the other C0 controls). A lone surrogate cannot be written.
- **Whitespace is fixed**: the compact separators of `memworker.wire.SEPARATORS`, `","` between
  items and `":"` after keys, nothing before, after or inside brackets. So the only text the
  grammar accepts for a value is the text `memworker.wire.dump_answer` writes for it, byte for
  byte (training targets and constrained outputs cannot drift apart).
- **Enum and const values** become literals of their `json.dumps(..., ensure_ascii=False)` text,
  escaped for GBNF (quotes, backslashes, newlines and every non-ASCII code point as `\\x/\\u/\\U`).
- **Objects** emit every property, in schema order (all properties must be `required`).
- **Everything is bounded** by default: a string without `maxLength` or an array without
  `maxItems` is refused (`require_bounds=False` lifts that), so a grammar always terminates.

Supported keywords: `type` (one or a list), `enum`, `const`, `anyOf`, object `properties` /
`required` / `additionalProperties: false`, array `items` / `minItems` / `maxItems`, a fixed-order
array (`prefixItems`, with `items: false` and maxItems its length; a minItems below it leaves
the trailing items optional, in order), string
`minLength` / `maxLength` / `pattern` (anchored; literals, classes, groups, `|`, `? * + {m,n}`,
`\\d`), integer `minimum` / `maximum` (small ranges are enumerated), `number`, `boolean`, `null`.
`uniqueItems` is accepted but *not enforced* (a grammar cannot express it; the codec checks
distinctness after decoding). Annotations (`title`, `description`, `$schema`, `$id`, `$comment`,
`examples`, `default`) are ignored. Anything else raises `UnsupportedSchema` naming the keyword and
its location.

    >>> print(schema_to_gbnf({"enum": ["a", 'say "hi"']}), end="")
    root ::= value
    value ::= "\\"a\\"" | "\\"say \\\\\\"hi\\\\\\"\\""
"""

from __future__ import annotations

import json
import re
from typing import Any

from memworker.wire import SEPARATORS

ITEM_SEP, KEY_SEP = SEPARATORS
ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "examples",
                         "default"})
_TYPE_KEYWORDS = {
    "string": {"minLength", "maxLength", "pattern"},
    "integer": {"minimum", "maximum"},
    "number": set(),
    "boolean": set(),
    "null": set(),
    "array": {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"},
    "object": {"properties", "required", "additionalProperties"},
}
_ALL_TYPE_KEYWORDS = set().union(*_TYPE_KEYWORDS.values())
MAX_ENUMERATED_INTEGERS = 1000

#: one character of a JSON string: no quote, backslash or control character raw; only the escapes
#: json.dumps writes.
CHAR_RULE = r'char ::= [^"\\\x00-\x1F\x7F] | "\\" ( ["\\bfnrt] | "u00" [01] [0-9a-f] )'
INTEGER_BODY = r'"-"? ( "0" | [1-9] [0-9]{0,15} )'
NUMBER_BODY = r'"-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?'


class GrammarError(ValueError):
    """A grammar cannot be built (or, for backends, llama.cpp refused to parse it)."""


class UnsupportedSchema(GrammarError):
    """The schema uses a keyword or combination outside the supported subset."""

    def __init__(self, path: str, message: str):
        self.path = path or "/"
        super().__init__(f"schema at {self.path}: {message}")


# --- GBNF literal escaping ------------------------------------------------------------------------

def _escape_code_point(ch: str) -> str:
    cp = ord(ch)
    if cp <= 0xFF:
        return f"\\x{cp:02X}"
    if cp <= 0xFFFF:
        return f"\\u{cp:04X}"
    return f"\\U{cp:08X}"


def gbnf_literal(text: str) -> str:
    """`text` as a GBNF string literal: `"` and `\\` escaped, anything outside printable ASCII as a
    `\\x`/`\\u`/`\\U` code point escape (so newlines, DEL and non-ASCII survive exactly)."""
    out = ['"']
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.append(_escape_code_point(ch))
    out.append('"')
    return "".join(out)


def json_literal(value: Any) -> str:
    """GBNF literal of the exact text json.dumps writes for `value` (compact, UTF-8 kept)."""
    return gbnf_literal(json.dumps(value, ensure_ascii=False, separators=SEPARATORS))


def _class_char(ch: str) -> str:
    return ch if ch.isascii() and ch.isalnum() else _escape_code_point(ch)


def _repeat(expr: str, lo: int, hi: int | None) -> str:
    """GBNF for `expr` repeated lo..hi times (hi None: unbounded); '' when it can only be empty."""
    if hi is not None and hi == 0:
        return ""
    if lo == 1 and hi == 1:
        return expr
    if hi is None:
        return {0: f"{expr}*", 1: f"{expr}+"}.get(lo, f"{expr}{{{lo},}}")
    if lo == 0 and hi == 1:
        return f"{expr}?"
    if lo == hi:
        return f"{expr}{{{lo}}}"
    return f"{expr}{{{lo},{hi}}}"


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


# --- regex (pattern) subset -> GBNF ---------------------------------------------------------------

_REGEX_META = set(".^$*+?()[]{}|\\")


class _Pattern:
    """Recursive-descent translation of an anchored regex subset; tracks min/max match length."""

    def __init__(self, pattern: str, path: str):
        self.src, self.path, self.i = pattern, path, 0

    def fail(self, why: str) -> UnsupportedSchema:
        return UnsupportedSchema(self.path, f"pattern {self.src!r}: {why}")

    def translate(self) -> tuple[str, int, int | None]:
        if not (self.src.startswith("^") and self.src.endswith("$") and not self.src.endswith("\\$")):
            raise self.fail("only anchored patterns ('^...$') are supported")
        self.src = self.src[1:-1]
        expr, lo, hi = self.alternation()
        if self.i != len(self.src):
            raise self.fail(f"unexpected {self.src[self.i]!r} at offset {self.i + 1}")
        return expr, lo, hi

    def peek(self) -> str | None:
        return self.src[self.i] if self.i < len(self.src) else None

    def alternation(self) -> tuple[str, int, int | None]:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        if len(branches) == 1:
            return branches[0]
        lo = min(b[1] for b in branches)
        his = [b[2] for b in branches]
        hi = None if None in his else max(his)
        return "( " + " | ".join(b[0] or '""' for b in branches) + " )", lo, hi

    def sequence(self) -> tuple[str, int, int | None]:
        parts, lo, hi = [], 0, 0
        while self.peek() not in (None, "|", ")"):
            expr, alo, ahi = self.atom()
            qlo, qhi = self.quantifier()
            parts.append(_repeat(expr, qlo, qhi))
            lo += alo * qlo
            hi = None if hi is None or ahi is None or qhi is None else hi + ahi * qhi
        return _join(*parts), lo, hi

    def quantifier(self) -> tuple[int, int | None]:
        ch = self.peek()
        if ch in ("?", "*", "+"):
            self.i += 1
            q = {"?": (0, 1), "*": (0, None), "+": (1, None)}[ch]
        elif ch == "{":
            m = re.compile(r"\{(\d+)(?:(,)(\d*))?\}").match(self.src, self.i)
            if not m:
                raise self.fail(f"bad repetition at offset {self.i + 1}")
            self.i = m.end()
            lo = int(m.group(1))
            hi = lo if not m.group(2) else (int(m.group(3)) if m.group(3) else None)
            if hi is not None and hi < lo:
                raise self.fail(f"repetition {{{lo},{hi}}} has max < min")
            q = (lo, hi)
        else:
            return 1, 1
        if self.peek() in ("?", "+"):
            raise self.fail("lazy/possessive quantifiers are not supported")
        return q

    def atom(self) -> tuple[str, int, int | None]:
        ch = self.src[self.i]
        if ch == "(":
            self.i += 1
            if self.src.startswith("?:", self.i):
                self.i += 2
            elif self.peek() == "?":
                raise self.fail("only plain and (?:...) groups are supported")
            expr, lo, hi = self.alternation()
            if self.peek() != ")":
                raise self.fail("unclosed group")
            self.i += 1
            return f"( {expr or chr(34) * 2} )", lo, hi
        if ch == "[":
            return self.char_class(), 1, 1
        if ch == "\\":
            return self.escape(in_class=False), 1, 1
        if ch in _REGEX_META:
            raise self.fail(f"{ch!r} at offset {self.i + 1} is not supported")
        self.i += 1
        return gbnf_literal(self._string_char(ch)), 1, 1

    def _string_char(self, ch: str) -> str:
        if not (" " <= ch <= "~") or ch in '"\\':
            raise self.fail(f"{ch!r} cannot appear raw in a JSON string; not supported in patterns")
        return ch

    def escape(self, in_class: bool) -> str:
        if self.i + 1 >= len(self.src):
            raise self.fail("dangling backslash")
        ch = self.src[self.i + 1]
        self.i += 2
        if ch == "d":
            return "0-9" if in_class else "[0-9]"
        if ch in _REGEX_META or ch in "-/":
            if ch == "\\":
                raise self.fail("a backslash needs a JSON escape; not supported in patterns")
            return _class_char(ch) if in_class else gbnf_literal(ch)
        raise self.fail(f"escape \\{ch} is not supported")

    def char_class(self) -> str:
        self.i += 1
        if self.peek() == "^":
            raise self.fail("negated classes are not supported (they would admit control chars)")
        items: list[str] = []
        while True:
            ch = self.peek()
            if ch is None:
                raise self.fail("unclosed character class")
            if ch == "]" and items:
                self.i += 1
                break
            if ch == "\\":
                items.append(self.escape(in_class=True))
                continue
            self.i += 1
            lo_ch = self._string_char(ch)
            if self.peek() == "-" and self.i + 1 < len(self.src) and self.src[self.i + 1] != "]":
                hi_ch = self._string_char(self.src[self.i + 1])
                if hi_ch < lo_ch:
                    raise self.fail(f"bad range {lo_ch}-{hi_ch}")
                self.i += 2
                items.append(f"{_class_char(lo_ch)}-{_class_char(hi_ch)}")
            else:
                items.append(_class_char(lo_ch))
        return "[" + "".join(items) + "]"


# --- converter ------------------------------------------------------------------------------------

class _Converter:
    def __init__(self, require_bounds: bool):
        self.require_bounds = require_bounds
        self.rules: dict[str, str] = {}
        self.by_body: dict[str, str] = {}
        self.uses_char = False

    def rule(self, hint: str, body: str) -> str:
        """Name of a rule with this body (identical bodies share one rule)."""
        if body in self.by_body:
            return self.by_body[body]
        base = re.sub(r"[^a-zA-Z0-9]+", "-", hint).strip("-").lower() or "r"
        name, n = base, 1
        while name in self.rules or name in ("root", "char"):
            n += 1
            name = f"{base}-{n}"
        self.rules[name] = body
        self.by_body[body] = name
        return name

    def visit(self, schema: Any, path: str, hint: str) -> str:
        if not isinstance(schema, dict):
            raise UnsupportedSchema(path, f"a schema must be an object, got {type(schema).__name__}")
        keys = set(schema) - ANNOTATIONS
        if "anyOf" in schema:
            extra = keys - {"anyOf"}
            if extra:
                raise UnsupportedSchema(path, f"anyOf cannot be combined with {sorted(extra)}")
            branches = schema["anyOf"]
            if not isinstance(branches, list) or not branches:
                raise UnsupportedSchema(path, "anyOf must be a non-empty list")
            alts = [self.visit(b, f"{path}/anyOf/{i}", f"{hint}-{i}")
                    for i, b in enumerate(branches)]
            return self.rule(hint, " | ".join(alts))
        if "const" in schema or "enum" in schema:
            return self.visit_choice(schema, keys, path, hint)
        if "type" not in schema:
            unknown = keys - _ALL_TYPE_KEYWORDS
            if unknown:
                raise UnsupportedSchema(path, f"unsupported keyword(s) {sorted(unknown)}")
            raise UnsupportedSchema(path, "needs a 'type', 'enum', 'const' or 'anyOf' "
                                          "(an unconstrained value has no bounded grammar)")
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not types or any(t not in _TYPE_KEYWORDS for t in types):
            raise UnsupportedSchema(path, f"unsupported type {schema['type']!r}")
        allowed = {"type"}.union(*(_TYPE_KEYWORDS[t] for t in types))
        unknown = keys - allowed
        if unknown:
            known = unknown & _ALL_TYPE_KEYWORDS
            why = (f"keyword(s) {sorted(known)} do not apply to type {schema['type']!r}" if known
                   and known == unknown else f"unsupported keyword(s) {sorted(unknown - known)}")
            raise UnsupportedSchema(path, why)
        alts = [self.visit_type(t, schema, path, hint if len(types) == 1 else f"{hint}-{t}")
                for t in types]
        return alts[0] if len(alts) == 1 else self.rule(hint, " | ".join(alts))

    def visit_choice(self, schema: dict, keys: set, path: str, hint: str) -> str:
        if "const" in schema and "enum" in schema:
            raise UnsupportedSchema(path, "use either const or enum, not both")
        extra = keys - {"const", "enum", "type"}
        if extra:
            raise UnsupportedSchema(path, f"enum/const cannot be combined with {sorted(extra)}")
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not isinstance(values, list) or not values:
            raise UnsupportedSchema(path, "enum must be a non-empty list")
        if "type" in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            for v in values:
                if _json_type(v) not in types and not (_json_type(v) == "integer"
                                                       and "number" in types):
                    raise UnsupportedSchema(path, f"enum value {v!r} is not of type {types}")
        literals = list(dict.fromkeys(json_literal(v) for v in values))
        return self.rule(hint, " | ".join(literals))

    def visit_type(self, t: str, schema: dict, path: str, hint: str) -> str:
        if t == "null":
            return '"null"'
        if t == "boolean":
            return self.rule("boolean", '"true" | "false"')
        if t == "number":
            return self.rule("number", NUMBER_BODY)
        if t == "integer":
            return self.visit_integer(schema, path)
        if t == "string":
            return self.visit_string(schema, path, hint)
        if t == "array":
            return self.visit_array(schema, path, hint)
        return self.visit_object(schema, path, hint)

    def visit_integer(self, schema: dict, path: str) -> str:
        lo, hi = schema.get("minimum"), schema.get("maximum")
        for name, v in (("minimum", lo), ("maximum", hi)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise UnsupportedSchema(path, f"integer {name} must be an integer, got {v!r}")
        if lo is None and hi is None:
            return self.rule("integer", INTEGER_BODY)
        if lo is not None and hi is not None:
            if hi < lo:
                raise UnsupportedSchema(path, f"maximum {hi} < minimum {lo}")
            if hi - lo + 1 > MAX_ENUMERATED_INTEGERS:
                raise UnsupportedSchema(path, f"integer range {lo}..{hi} is too large to enumerate "
                                              f"(at most {MAX_ENUMERATED_INTEGERS} values)")
            return self.rule(f"int-{lo}-{hi}", " | ".join(f'"{v}"' for v in range(lo, hi + 1)))
        if hi is None and lo == 0:
            return self.rule("nonneg-int", '"0" | [1-9] [0-9]{0,15}')
        if hi is None and lo == 1:
            return self.rule("pos-int", "[1-9] [0-9]{0,15}")
        raise UnsupportedSchema(path, "integer bounds other than a closed range, minimum 0 or "
                                      "minimum 1 are not supported")

    def visit_string(self, schema: dict, path: str, hint: str) -> str:
        lo, hi = schema.get("minLength", 0), schema.get("maxLength")
        if not isinstance(lo, int) or (hi is not None and not isinstance(hi, int)):
            raise UnsupportedSchema(path, "minLength/maxLength must be integers")
        if hi is not None and hi < lo:
            raise UnsupportedSchema(path, f"maxLength {hi} < minLength {lo}")
        if "pattern" in schema:
            expr, plo, phi = _Pattern(schema["pattern"], path).translate()
            if plo < lo or (hi is not None and (phi is None or phi > hi)):
                raise UnsupportedSchema(
                    path, f"pattern {schema['pattern']!r} matches {plo}..{phi} characters, "
                          f"outside minLength/maxLength {lo}..{hi}; the grammar cannot enforce both")
            if phi is None and self.require_bounds:
                raise UnsupportedSchema(path, "pattern is unbounded and there is no maxLength")
            return self.rule(f"{hint}-pattern", _join('"\\""', expr, '"\\""'))
        if hi is None and self.require_bounds:
            raise UnsupportedSchema(path, "string without maxLength: unbounded output cannot fit a "
                                          "token budget (pass require_bounds=False to allow)")
        self.uses_char = True
        return self.rule(f"string-{lo}-{hi}", _join('"\\""', _repeat("char", lo, hi), '"\\""'))

    def visit_tuple(self, schema: dict, path: str, hint: str) -> str:
        prefix = schema["prefixItems"]
        if not isinstance(prefix, list) or not prefix:
            raise UnsupportedSchema(path, "prefixItems must be a non-empty list")
        if schema.get("items") is not False:  # absent: any further items are allowed
            raise UnsupportedSchema(path, "prefixItems needs items: false (a fixed-order array)")
        n = len(prefix)
        lo = schema.get("minItems", 0)
        # an absent minItems is 0: shorter arrays would be valid, which the grammar refuses; a
        # minItems from 1 to n leaves the items after it optional, each only after the one
        # before it (`[a,b]`, `[a,b,c]`, ... as JSON Schema allows a shorter prefix)
        if not isinstance(lo, int) or not 1 <= lo <= n or schema.get("maxItems", n) != n:
            raise UnsupportedSchema(path, f"a fixed-order array of {n} items must have minItems "
                                          f"1 to {n} and maxItems {n}")
        items = [self.visit(sub, f"{path}/prefixItems/{i}", f"{hint}-{i}")
                 for i, sub in enumerate(prefix)]
        tail = ""
        for item in reversed(items[lo:]):
            tail = f"({_join(gbnf_literal(ITEM_SEP), item, tail)})?"
        parts = ['"["']
        for i, item in enumerate(items[:lo]):
            if i:
                parts.append(gbnf_literal(ITEM_SEP))
            parts.append(item)
        if tail:
            parts.append(tail)
        parts.append('"]"')
        return self.rule(hint, _join(*parts))

    def visit_array(self, schema: dict, path: str, hint: str) -> str:
        if "prefixItems" in schema:
            return self.visit_tuple(schema, path, hint)
        lo, hi = schema.get("minItems", 0), schema.get("maxItems")
        if not isinstance(lo, int) or (hi is not None and not isinstance(hi, int)):
            raise UnsupportedSchema(path, "minItems/maxItems must be integers")
        if hi is not None and hi < lo:
            raise UnsupportedSchema(path, f"maxItems {hi} < minItems {lo}")
        if hi == 0:
            return '"[]"'
        if hi is None and self.require_bounds:
            raise UnsupportedSchema(path, "array without maxItems: unbounded output cannot fit a "
                                          "token budget (pass require_bounds=False to allow)")
        if "items" not in schema:
            raise UnsupportedSchema(path, "array needs an 'items' schema")
        item = self.visit(schema["items"], f"{path}/items", f"{hint}-item")
        more = _repeat(f"( {gbnf_literal(ITEM_SEP)} {item} )", max(lo - 1, 0),
                       None if hi is None else hi - 1)
        if lo == 0:
            body = _join('"["', f"( {_join(item, more)} )?", '"]"')
        else:
            body = _join('"["', item, more, '"]"')
        return self.rule(hint, body)

    def visit_object(self, schema: dict, path: str, hint: str) -> str:
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise UnsupportedSchema(path, "properties must be an object")
        if schema.get("additionalProperties", False) is not False:
            raise UnsupportedSchema(path, "only additionalProperties: false is supported")
        required = schema.get("required", [])
        if sorted(required) != sorted(props) or len(set(required)) != len(required):
            missing = sorted(set(props) - set(required))
            raise UnsupportedSchema(path, "every property must be required (optional properties "
                                          f"are not supported: {missing or sorted(required)})")
        if not props:
            return '"{}"'
        parts = ['"{"']
        for n, (key, sub) in enumerate(props.items()):
            prefix = (ITEM_SEP if n else "") + json.dumps(key, ensure_ascii=False) + KEY_SEP
            parts.append(gbnf_literal(prefix))
            parts.append(self.visit(sub, f"{path}/properties/{key}", f"{hint}-{key}"))
        parts.append('"}"')
        return self.rule(hint, _join(*parts))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def schema_to_gbnf(schema: dict[str, Any], *, require_bounds: bool = True) -> str:
    """GBNF text (root rule `root`) accepting exactly the compact json.dumps text of the values the
    schema allows (uniqueItems aside). Raises UnsupportedSchema for anything outside the subset."""
    conv = _Converter(require_bounds)
    root = conv.visit(schema, "", "value")
    lines = [f"root ::= {root}"] + [f"{name} ::= {body}" for name, body in conv.rules.items()]
    if conv.uses_char:
        lines.append(CHAR_RULE)
    return "\n".join(lines) + "\n"
