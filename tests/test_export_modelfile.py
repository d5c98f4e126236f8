"""The release Modelfile: its Go TEMPLATE renders exactly the training chat format.

No Ollama server can run here (FACTS.md: it is in neither Debian's nor PyPI's packages), so the
template is rendered by `go_render` below, a small reference implementation of the subset of Go's
text/template the Modelfile uses (range with index, if, and/eq/ne/len/slice, field access, `$`),
and compared byte for byte with the tokenizer's own `apply_chat_template` (the tiny tokenizer
carries SmolLM2's exact template; a slow test uses the embedded base's tokenizer).
Ollama's behaviour modelled here: a request without a system message gets the Modelfile's SYSTEM
as the first message.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from memworker.export import modelfile as mfile
from memworker.inference import codec
from memworker.prompts import render, system_prompt, to_chatml
from tests.helpers import episode

# --- a reference renderer of the Go text/template subset -----------------------------------------

_ACTION = re.compile(r"\{\{(.*?)\}\}", re.S)
_TOKEN = re.compile(r'\(|\)|"(?:[^"\\]|\\.)*"|[^\s()]+')


def _parse(tokens: list[tuple[str, str]], i: int, top: bool = False) -> tuple[list, int]:
    nodes: list = []
    while i < len(tokens):
        kind, val = tokens[i]
        if kind == "text":
            nodes.append(("text", val))
            i += 1
        elif val == "end":
            assert not top, "unbalanced {{ end }}"
            return nodes, i + 1
        elif val.startswith("range "):
            m = re.fullmatch(r"range \$(\w+), \$(\w+) := (.+)", val)
            assert m, f"unsupported range: {val}"
            body, i = _parse(tokens, i + 1)
            nodes.append(("range", m.group(1), m.group(2), m.group(3), body))
        elif val.startswith("if "):
            body, i = _parse(tokens, i + 1)
            nodes.append(("if", val[3:], body))
        else:
            nodes.append(("expr", val))
            i += 1
    assert top, "missing {{ end }}"
    return nodes, i


def _truthy(v: Any) -> bool:
    return not (v is None or v is False or v == 0 or v == "" or v == [] or v == {})


_FUNCS = {
    "len": lambda x: len(x),
    "slice": lambda x, i: x[i:],
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "not": lambda a: not _truthy(a),
    "and": lambda *xs: next((x for x in xs if not _truthy(x)), xs[-1]),
    "or": lambda *xs: next((x for x in xs if _truthy(x)), xs[-1]),
}


def _operand(tokens: list[str], env: dict) -> tuple[Any, list[str]]:
    tok, rest = tokens[0], tokens[1:]
    if tok == "(":
        value, rest = _command(rest, env)
        assert rest[:1] == [")"], "missing )"
        return value, rest[1:]
    if tok.startswith('"'):
        return tok[1:-1].encode().decode("unicode_escape"), rest
    if tok.isdigit():
        return int(tok), rest
    if tok.startswith("$."):
        return env["$"][tok[2:]], rest
    if tok.startswith("$"):
        return env["vars"][tok[1:]], rest
    if tok.startswith("."):
        return env["dot"][tok[1:]], rest
    raise AssertionError(f"unsupported operand {tok!r}")


def _command(tokens: list[str], env: dict) -> tuple[Any, list[str]]:
    if tokens[0] in _FUNCS:
        name, rest, args = tokens[0], tokens[1:], []
        while rest and rest[0] != ")":
            value, rest = _operand(rest, env)
            args.append(value)
        return _FUNCS[name](*args), rest
    return _operand(tokens, env)


def _eval(expr: str, env: dict) -> Any:
    value, rest = _command(_TOKEN.findall(expr), env)
    assert not rest, f"trailing tokens in {expr!r}: {rest}"
    return value


def _exec(nodes: list, env: dict, out: list[str]) -> None:
    for node in nodes:
        if node[0] == "text":
            out.append(node[1])
        elif node[0] == "expr":
            out.append(str(_eval(node[1], env)))
        elif node[0] == "if":
            if _truthy(_eval(node[1], env)):
                _exec(node[2], env, out)
        else:
            _, ivar, evar, expr, body = node
            for i, item in enumerate(_eval(expr, env)):
                _exec(body, {**env, "dot": item, "vars": {**env["vars"], ivar: i, evar: item}},
                      out)


def go_render(template: str, data: dict[str, Any]) -> str:
    tokens: list[tuple[str, str]] = []
    pos = 0
    for m in _ACTION.finditer(template):
        tokens.append(("text", template[pos:m.start()]))
        body = m.group(1)
        assert not body.startswith("-") and not body.endswith("-"), "trim markers unsupported"
        tokens.append(("action", body.strip()))
        pos = m.end()
    tokens.append(("text", template[pos:]))
    nodes, _ = _parse(tokens, 0, top=True)
    out: list[str] = []
    _exec(nodes, {"$": data, "dot": data, "vars": {}}, out)
    return "".join(out)


def ollama_render(modelfile_text: str, messages: list[dict[str, str]]) -> str:
    """What Ollama renders for a chat request: the Modelfile's SYSTEM first when the request has
    no system message, then its TEMPLATE over .Messages (Role, Content)."""
    parsed = mfile.parse(modelfile_text)
    if not any(m["role"] == "system" for m in messages):
        messages = [{"role": "system", "content": parsed["SYSTEM"][0]}, *messages]
    data = {"Messages": [{"Role": m["role"], "Content": m["content"]} for m in messages]}
    return go_render(parsed["TEMPLATE"][0], data)


# --- tests ---------------------------------------------------------------------------------------

def test_reference_renderer_follows_go_semantics():
    assert go_render('{{ if and (eq 1 1) (ne "a" "b") }}x{{ end }}y', {}) == "xy"
    assert go_render('{{ if and (eq 1 2) (ne "a" "b") }}x{{ end }}y', {}) == "y"
    data = {"L": [{"V": "a"}, {"V": "b"}, {"V": "c"}]}
    assert go_render("{{ range $i, $_ := .L }}{{ $i }}{{ .V }}"
                     "{{ if eq (len (slice $.L $i)) 1 }}!{{ end }}{{ end }}", data) == "0a1b2c!"
    with pytest.raises(AssertionError):
        go_render("{{- .X }}", {"X": 1})


def _text(**kw) -> str:
    return mfile.render("./student-q8_0.gguf", end_of_turn="<|im_end|>", license_text="Apache-2.0",
                        **kw)


def _conversations() -> list[tuple[list[dict[str, str]], bool]]:
    """(messages, add_generation_prompt) pairs: a request, a training row, a retry."""
    request = render("extract", episode())
    answer = {"role": "assistant", "content": '{"claims": []}'}
    retry = codec.retry_message(codec.OutputParseError("not one JSON object"))
    return [(request, True), ([*request, answer], False), ([*request, retry], True),
            (render("reflect", {"question": "Where does Ana live?", "asked_at":
                                "2025-10-09T10:00:00Z", "evidence": []}), True)]


def test_modelfile_instructions():
    parsed = mfile.parse(_text())
    assert parsed["FROM"] == ["./student-q8_0.gguf"]
    assert parsed["SYSTEM"] == [system_prompt()]
    assert parsed["TEMPLATE"] == [mfile.TEMPLATE]
    params = parsed["PARAMETER"]
    assert "temperature 0" in params and "repeat_penalty 1" in params
    assert f"num_ctx {mfile.NUM_CTX}" in params
    assert 'stop "<|im_end|>"' in params and 'stop "<|im_start|>"' in params
    assert parsed["LICENSE"] == ["Apache-2.0"]
    with pytest.raises(ValueError, match="cannot quote"):
        _text(system='say """hi"""')


def _check_against(tokenizer) -> None:
    text = _text()
    for messages, gen in _conversations():
        expected = tokenizer.apply_chat_template(messages, tokenize=False,
                                                 add_generation_prompt=gen)
        assert ollama_render(text, messages) == expected == to_chatml(messages, gen)
    # Ollama inserts the Modelfile SYSTEM when the request has none: same bytes as training
    request, _ = _conversations()[0]
    assert ollama_render(text, request[1:]) == tokenizer.apply_chat_template(
        request, tokenize=False, add_generation_prompt=True)


def test_template_matches_the_tiny_tokenizers_smollm2_template(tmp_path):
    from tests.fixtures.tiny import build_tokenizer

    _check_against(build_tokenizer(tmp_path / "tok"))


@pytest.mark.slow
def test_template_matches_the_embedded_base_tokenizer():
    from transformers import AutoTokenizer

    from memworker import registry

    _check_against(AutoTokenizer.from_pretrained(registry.prepare().path))
