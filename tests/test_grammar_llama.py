"""The grammar inside llama.cpp itself (slow tier: needs the compiled library and the embedded
base GGUF).

1. llama.cpp's GBNF parser accepts every grammar we build (static contracts, dynamic schemas),
   and the parsed grammar accepts a schema-valid answer's compact text and refuses near misses.
2. llama.cpp's grammar sampler accepts gold-like training targets (`dump_answer`) token by token,
   ends only where the answer ends, and refuses a changed byte.
   (Texts llama.cpp's tokenizer cannot round-trip are fed as single-byte tokens.)
3. 21 outputs sampled at temperature 1.0 from the embedded base under the grammar (three tasks,
   varied inputs, three seeds each) all parse as JSON and validate against the dynamic schema.
"""

from __future__ import annotations

import ctypes
import functools
import json
import math
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from memworker.contracts import load_schema
from memworker.inference import codec
from memworker.inference.backends import LlamaCppBackend
from memworker.inference.grammar import schema_to_gbnf
from memworker.inference.samples import SAMPLES
from memworker.inference.schema import Limits, build_schema
from memworker.wire import dump_answer
from tests.test_codec_strategies import INPUTS, answers

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vocab_model(embedded_gguf, llama_cpp):
    llm = llama_cpp.Llama(model_path=str(embedded_gguf), vocab_only=True, verbose=False)
    yield llm
    llm.close()


@functools.cache
def _byte_tokens(llm) -> dict[int, int]:
    """{byte: id of the vocabulary token that is exactly that one byte} (byte-level BPE)."""
    out: dict[int, int] = {}
    for token in range(llm.n_vocab()):
        piece = llm.detokenize([token])
        if len(piece) == 1:
            out.setdefault(piece[0], token)
    return out


def tokens_of(llm, text: str) -> list[int] | None:
    """Tokens whose bytes are exactly `text`'s UTF-8 bytes, or None when the vocabulary cannot
    spell them. llama.cpp's tokenizer is not lossless for some code points (U+40000 comes back
    as 80 80 80): such texts are spelled with single-byte tokens; SmolLM2's vocabulary has no
    token for the lead bytes F1/F2 (U+40000-U+BFFFF), so no model output can contain those."""
    data = text.encode("utf-8")
    tokens = llm.tokenize(data, add_bos=False, special=False)
    if llm.detokenize(tokens) == data:
        return tokens
    byte_tokens = _byte_tokens(llm)
    if any(b not in byte_tokens for b in data):
        return None
    return [byte_tokens[b] for b in data]


def llama_accepts(llm, gbnf: str, text: str) -> bool | None:
    """Feed `text`'s tokens through llama.cpp's grammar sampler: each must survive `apply`
    (a rejected token gets logit -inf) before it is accepted; at the end EOS must be allowed.
    None when the vocabulary cannot spell the text."""
    import llama_cpp

    tokens = tokens_of(llm, text)
    if tokens is None:
        return None

    vocab = llm._model.vocab
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
    assert sampler, "llama.cpp could not parse the grammar"
    try:
        def allowed(token: int) -> bool:
            data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
            arr = llama_cpp.llama_token_data_array(data, 1, -1, False)
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(arr))
            return not math.isinf(data[0].logit)

        for token in tokens:
            if not allowed(token):
                return False
            llama_cpp.llama_sampler_accept(sampler, token)
        return allowed(llama_cpp.llama_vocab_eos(vocab))
    finally:
        llama_cpp.llama_sampler_free(sampler)


#: free text for a string without a pattern: a quote, a non-ASCII letter and a newline (the
#: escapes and raw UTF-8 the grammar's `char` rule must let through)
FREE_TEXT = 'Lisbon "é"\nPorto'


def _instance(schema: dict, i: int = 0):
    """A deterministic value valid under `schema` (the `i`-th of its siblings): two items in an
    array that may hold them (so the item separator is exercised), the `i`-th branch or enum value,
    free text with escapes."""
    if "anyOf" in schema:
        return _instance(schema["anyOf"][i % len(schema["anyOf"])], i)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][i % len(schema["enum"])]
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    t = next((t for t in types if t != "null"), "null")
    if t == "null":
        return None
    if t == "boolean":
        return True
    if t == "integer":
        return schema.get("maximum", 12)
    if t == "number":
        return 0.5
    if t == "string":
        lo, hi = schema.get("minLength", 0), schema["maxLength"]
        if "pattern" in schema:  # the ids and predicates: a lowercase letter, then digits
            text = f"a{i}"
            assert re.fullmatch(schema["pattern"], text) and lo <= len(text) <= hi, schema
            return text
        return (FREE_TEXT + str(i))[:hi].ljust(lo, "x")
    if t == "array":
        if "prefixItems" in schema:
            return [_instance(s, i) for s in schema["prefixItems"]]
        n = min(max(schema.get("minItems", 0), 2), schema["maxItems"])
        return [_instance(schema["items"], j) for j in range(n)]
    return {k: _instance(v, i) for k, v in schema["properties"].items()}


def test_llama_parses_static_and_dynamic_grammars(vocab_model):
    """Every grammar we build (static contracts, dynamic schemas under each budget) is parsed by
    llama.cpp, and the parsed grammar constrains: the compact text of a schema-valid answer is
    accepted token by token and may end there; a prefix of it, the same value with json.dumps'
    spaced separators, an empty object and an object with an unknown first key are refused."""
    schemas = [(n, load_schema(n))
               for n in ("extract_wire", "consolidate_wire", "reflect_wire",
                         "consolidate_output", "reflect_output")]
    schemas += [(f"{t} sample {k} budget {b}", build_schema(t, inp, budget_tokens=b))
                for t, items in SAMPLES.items() for k, inp in enumerate(items)
                for b in (None, -1, 120)]
    for name, schema in schemas:
        gbnf = schema_to_gbnf(schema)
        value = _instance(schema)
        jsonschema.Draft202012Validator(schema).validate(value)
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        assert llama_accepts(vocab_model, gbnf, text) is True, (name, text)
        refused = {"a prefix": text[:-1],
                   "spaced separators": json.dumps(value, ensure_ascii=False),
                   "an empty object": "{}",
                   "an unknown first key": text.replace('{"', '{"x', 1)}
        for why, bad in refused.items():
            assert bad != text
            assert llama_accepts(vocab_model, gbnf, bad) is False, (name, why, bad)


@pytest.mark.parametrize("task", ["extract", "consolidate", "reflect"])
def test_llama_sampler_accepts_gold_like_answers_byte_for_byte(vocab_model, task):
    @settings(max_examples=12, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=st.data(), inputs=INPUTS[task]())
    def check(data, inputs):
        schema = build_schema(task, inputs)
        gbnf = schema_to_gbnf(schema)
        text = dump_answer(task, data.draw(answers(schema)))
        verdict = llama_accepts(vocab_model, gbnf, text)
        assume(verdict is not None)  # a character the model's vocabulary cannot spell
        assert verdict, text
        assert llama_accepts(vocab_model, gbnf, text[:-1] + " " + text[-1]) is False
        assert llama_accepts(vocab_model, gbnf, text + " ") is False
        # json.dumps' default separators (", ", ": "; the v2 wire) are refused
        assert llama_accepts(vocab_model, gbnf,
                             json.dumps(json.loads(text), ensure_ascii=False)) is False

    check()


def test_temperature_one_outputs_all_parse_and_validate(embedded_gguf, llama_cpp):
    backend = LlamaCppBackend(embedded_gguf, n_ctx=2048, n_threads=2)
    tight = Limits(claims=1, quotes=1, supersedes=1, name=16, value=16, statement=40,
                   observations=1, answer=60)
    inputs = [("extract", SAMPLES["extract"][0]), ("extract", SAMPLES["extract"][1]),
              ("extract", SAMPLES["extract"][2]), ("consolidate", SAMPLES["consolidate"][0]),
              ("consolidate", SAMPLES["consolidate"][1]), ("reflect", SAMPLES["reflect"][0]),
              ("reflect", SAMPLES["reflect"][2])]
    outputs = []
    for task, inp in inputs:
        request = codec.prepare(task, inp, backend=backend, limits=tight)
        for seed in (1, 2, 3):  # same prompt three times: the KV cache keeps it cheap
            gen = backend.generate(request.messages, schema=request.schema,
                                   grammar=request.grammar, max_tokens=256, temperature=1.0,
                                   seed=seed)
            assert gen.finish_reason == "stop", (task, gen.text)
            answer = json.loads(gen.text)
            jsonschema.validate(answer, request.schema)
            assert gen.text == dump_answer(task, answer)  # compact, in grammar order
            outputs.append((task, gen.text))
    backend.llm.close()
    assert len(outputs) >= 20
    # sampling really varied: the reflect answer is free text (wire v4; the base writes no claim
    # and no observation at all here, the same text every time)
    assert len({text for task, text in outputs if task == "reflect"}) >= 3
