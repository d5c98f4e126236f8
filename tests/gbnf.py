"""A small GBNF reader and matcher: does a grammar accept a given text?

llama.cpp only tells whether a grammar *parses*; to check that a grammar accepts a training target
(`memworker.wire.dump_answer`) without a model, this module reads the GBNF subset that
`memworker.inference.grammar` writes (string literals, character classes with ranges and `^`,
rule references, groups, `|`, and the postfix operators `? * + {m} {m,} {m,n}`; `#` comments)
and matches whole texts code point by code point, as llama.cpp's sampler does.

It is a checker for the tests (it lives under tests/ because nothing in the package needs it),
not a decoder: matching returns the set of end
positions reachable from each (rule, position), memoised, so ambiguous grammars stay cheap.

    >>> accepts('root ::= "a" [0-9]{1,2}', "a42")
    True
    >>> accepts('root ::= "a" [0-9]{1,2}', "a423")
    False
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

Node = tuple[Any, ...]

_NAME = re.compile(r"[a-zA-Z0-9-]+")
_RULE_START = re.compile(r"([a-zA-Z0-9-]+)\s*::=")


class GbnfSyntaxError(ValueError):
    """The GBNF text is malformed (or uses something this reader does not know)."""


class _Reader:
    def __init__(self, text: str):
        self.s, self.i = text, 0

    def fail(self, why: str) -> GbnfSyntaxError:
        line = self.s.count("\n", 0, self.i) + 1
        return GbnfSyntaxError(f"GBNF line {line}: {why}")

    def skip(self, newlines: bool) -> None:
        while self.i < len(self.s):
            ch = self.s[self.i]
            if ch == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
            elif ch in " \t\r" or (newlines and ch == "\n"):
                self.i += 1
            else:
                return

    def grammar(self) -> dict[str, Node]:
        rules: dict[str, Node] = {}
        self.skip(True)
        while self.i < len(self.s):
            m = _RULE_START.match(self.s, self.i)
            if not m:
                raise self.fail(f"expected 'name ::=' at {self.s[self.i:self.i + 20]!r}")
            if m.group(1) in rules:
                raise self.fail(f"rule {m.group(1)!r} defined twice")
            self.i = m.end()
            rules[m.group(1)] = self.alternatives(depth=0)
            self.skip(True)
        for node in rules.values():
            _check_refs(node, rules)
        if "root" not in rules:
            raise GbnfSyntaxError("GBNF has no 'root' rule")
        return rules

    def alternatives(self, depth: int) -> Node:
        alts = [self.sequence(depth)]
        while True:
            self.skip(depth > 0)
            if self.i < len(self.s) and self.s[self.i] == "|":
                self.i += 1
                alts.append(self.sequence(depth))
            else:
                break
        return alts[0] if len(alts) == 1 else ("alt", tuple(alts))

    def sequence(self, depth: int) -> Node:
        items: list[Node] = []
        while True:
            self.skip(depth > 0)
            if self.i >= len(self.s) or self.s[self.i] in "|)\n":
                break
            if _RULE_START.match(self.s, self.i):
                break
            items.append(self.postfix(self.atom(depth)))
        return items[0] if len(items) == 1 else ("seq", tuple(items))

    def atom(self, depth: int) -> Node:
        ch = self.s[self.i]
        if ch == '"':
            self.i += 1
            out = []
            while True:
                if self.i >= len(self.s):
                    raise self.fail("unterminated string literal")
                if self.s[self.i] == '"':
                    self.i += 1
                    return ("lit", "".join(out))
                out.append(self.char())
        if ch == "[":
            self.i += 1
            negated = self.i < len(self.s) and self.s[self.i] == "^"
            self.i += negated
            ranges = []
            while True:
                if self.i >= len(self.s):
                    raise self.fail("unterminated character class")
                if self.s[self.i] == "]":
                    self.i += 1
                    return ("cls", negated, tuple(ranges))
                lo = self.char()
                hi = lo
                if self.s.startswith("-", self.i) and not self.s.startswith("-]", self.i):
                    self.i += 1
                    hi = self.char()
                ranges.append((ord(lo), ord(hi)))
        if ch == "(":
            self.i += 1
            node = self.alternatives(depth + 1)
            self.skip(True)
            if not self.s.startswith(")", self.i):
                raise self.fail("expected ')'")
            self.i += 1
            return node
        m = _NAME.match(self.s, self.i)
        if m:
            self.i = m.end()
            return ("ref", m.group(0))
        raise self.fail(f"unexpected {ch!r}")

    def char(self) -> str:
        ch = self.s[self.i]
        if ch != "\\":
            self.i += 1
            return ch
        esc = self.s[self.i + 1: self.i + 2]
        simple = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]"}
        if esc in simple:
            self.i += 2
            return simple[esc]
        width = {"x": 2, "u": 4, "U": 8}.get(esc)
        if width is None:
            raise self.fail(f"unknown escape \\{esc}")
        digits = self.s[self.i + 2: self.i + 2 + width]
        if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
            raise self.fail(f"bad \\{esc} escape")
        self.i += 2 + width
        return chr(int(digits, 16))

    def postfix(self, node: Node) -> Node:
        while self.i < len(self.s):
            ch = self.s[self.i]
            if ch in "?*+":
                self.i += 1
                node = ("rep", node, 0 if ch != "+" else 1, 1 if ch == "?" else None)
            elif ch == "{":
                m = re.compile(r"\{\s*(\d+)\s*(?:(,)\s*(\d*)\s*)?\}").match(self.s, self.i)
                if not m:
                    raise self.fail("bad repetition")
                self.i = m.end()
                lo = int(m.group(1))
                hi = lo if not m.group(2) else (int(m.group(3)) if m.group(3) else None)
                node = ("rep", node, lo, hi)
            else:
                break
        return node


def _check_refs(node: Node, rules: dict[str, Node]) -> None:
    kind = node[0]
    if kind == "ref" and node[1] not in rules:
        raise GbnfSyntaxError(f"undefined rule {node[1]!r}")
    if kind in ("seq", "alt"):
        for child in node[1]:
            _check_refs(child, rules)
    elif kind == "rep":
        _check_refs(node[1], rules)


def parse_gbnf(text: str) -> dict[str, Node]:
    """Rules of a GBNF text as small tuples; raises GbnfSyntaxError when malformed."""
    return _Reader(text).grammar()


class Matcher:
    """Whole-text acceptance for one grammar (reuse it for many texts)."""

    def __init__(self, gbnf: str):
        self.rules = parse_gbnf(gbnf)

    def accepts(self, text: str) -> bool:
        rules = self.rules

        @cache
        def rule_ends(name: str, pos: int) -> frozenset[int]:
            return frozenset(ends(rules[name], pos))

        def ends(node: Node, pos: int) -> set[int]:
            kind = node[0]
            if kind == "lit":
                return {pos + len(node[1])} if text.startswith(node[1], pos) else set()
            if kind == "cls":
                if pos >= len(text):
                    return set()
                cp = ord(text[pos])
                inside = any(lo <= cp <= hi for lo, hi in node[2])
                return {pos + 1} if inside != node[1] else set()
            if kind == "ref":
                return set(rule_ends(node[1], pos))
            if kind == "alt":
                out: set[int] = set()
                for child in node[1]:
                    out |= ends(child, pos)
                return out
            if kind == "seq":
                frontier = {pos}
                for child in node[1]:
                    frontier = {e for p in frontier for e in ends(child, p)}
                    if not frontier:
                        break
                return frontier
            _, child, lo, hi = node
            out = {pos} if lo == 0 else set()
            frontier, seen, count = {pos}, {pos}, 0
            while frontier and (hi is None or count < hi):
                frontier = {e for p in frontier for e in ends(child, p)}
                count += 1
                if count >= lo:
                    frontier -= seen if hi is None else set()
                    out |= frontier
                    seen |= frontier
            return out

        return len(text) in rule_ends("root", 0)


def accepts(gbnf: str, text: str) -> bool:
    """True when the grammar's root rule matches the whole text."""
    return Matcher(gbnf).accepts(text)
