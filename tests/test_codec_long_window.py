"""Long extract windows (corpus v2: 6-24 events, ~400-1,300 event tokens): a realistic gold answer
of 8 claims with 3 quotes each and values <= 80 characters (wire v3: the statement is rendered by
the codec, not written) stays representable under the dynamic schema within n_ctx 4096, and
max_tokens never runs past the context left."""

from __future__ import annotations

import jsonschema
import pytest

from memworker import wire
from memworker.inference.grammar import schema_to_gbnf
from memworker.inference.schema import (
    build_schema,
    max_tokens_for,
    typical_tokens,
    worst_case_chars,
)
from memworker.wire import dump_answer
from tests.gbnf import Matcher

N_CTX = 4096
SENTENCES = [
    "I finally moved into the flat on Rua Augusta last week, and the commute to the studio is "
    "much shorter now.",
    "My sister Maria is coming to visit next Friday, so I need to clear the spare room before "
    "she arrives.",
    "That sounds lovely; would you like me to add a reminder to clean the spare room on "
    "Thursday evening?",
    "No thanks, I will do it on Wednesday, because Thursday is the team dinner at the Italian "
    "place near work.",
    "By the way, I stopped eating meat in March and I feel much better; my doctor says my iron "
    "levels are fine.",
]
TAILS = ["Thanks for asking.", "It has been a long week.", "Anyway.", "Let me think."]
#: ChatML prompt tokens of WINDOW with the embedded SmolLM2 tokenizer (1,433 of them the rendered
#: event lines; the wire v3 prompt); re-measured by the slow test below
PROMPT_TOKENS = 1732


def window() -> dict:
    events = [{"index": i, "role": "user" if i % 2 == 0 else "assistant",
               "timestamp": f"2025-10-08T09:{i:02d}:00+02:00",
               "text": f"{SENTENCES[i % 5]} {TAILS[i % 4]}", "trusted": True}
              for i in range(24)]
    facts = [{"id": f"F{k}", "statement": "The user lives in Porto.", "valid_from": "2024-01"}
             for k in range(1, 5)]
    return {"episode_id": "w24", "events": events, "existing_facts": facts}


def gold() -> dict:
    """8 claims x 3 sentence quotes; value 70 characters; as the model writes it (arrays)."""
    claims = []
    for k in range(8):
        quotes = [[SENTENCES[(3 * k + j) % 24 % 5], (3 * k + j) % 24] for j in range(3)]
        claims.append([
            quotes, "Maria, the user's sister", "person", "plans_to",
            "visiting the user in Lisbon for the weekend, staying in the spare room", "plan",
            "next Friday", ["F1"]])
    return {"claims": claims}


def _bounded(schema) -> None:
    """Every string has maxLength and every array maxItems (the grammar-bug precaution)."""
    if isinstance(schema, dict):
        types = schema.get("type")
        types = types if isinstance(types, list) else [types]
        if "string" in types and "enum" not in schema and "const" not in schema:
            assert "maxLength" in schema, schema
        if "array" in types:
            assert "maxItems" in schema, schema
        for value in schema.values():
            _bounded(value)
    elif isinstance(schema, list):
        for value in schema:
            _bounded(value)


def test_a_24_event_window_keeps_8_claims_of_3_quotes_within_the_context():
    inputs, answer = window(), gold()
    records = wire.claim_records(answer)
    assert max(len(r["value"]) for r in records) <= 80
    # the statement the codec renders fits the canonical contract unclipped
    assert max(len(wire.render_statement(r)) for r in records) <= 300
    left = N_CTX - PROMPT_TOKENS
    schema = build_schema("extract", inputs, budget_tokens=left)
    claims = schema["properties"]["claims"]
    quotes, name, _, _, value, *_ = claims["items"]["prefixItems"]
    assert (claims["maxItems"], quotes["maxItems"]) == (8, 3)
    # no free text shrinks below the gold's (wire v3 leaves 120 value characters here)
    assert value["maxLength"] >= 80 and name["maxLength"] >= len("Maria, the user's sister")
    assert typical_tokens(schema) <= left
    assert not list(jsonschema.Draft202012Validator(schema).iter_errors(answer))
    assert Matcher(schema_to_gbnf(schema)).accepts(dump_answer("extract", answer))
    _bounded(schema)
    # the hard cap: never more than the context left, whatever the worst case
    assert max_tokens_for(schema) > left and worst_case_chars(schema) > 2 * left
    assert max_tokens_for(schema, context_left=left) == left


def test_a_fuller_context_still_shrinks_the_schema_rather_than_overflow():
    # (wire v3 claims are shorter than v2's: 8 of them still fit a 1,200-token budget)
    inputs = window()
    schema = build_schema("extract", inputs, budget_tokens=900)
    claims = schema["properties"]["claims"]
    assert claims["maxItems"] < 8 and typical_tokens(schema) <= 900
    _bounded(schema)
    assert max_tokens_for(schema, context_left=900) == 900


@pytest.mark.slow
def test_prepare_with_the_embedded_base_fits_the_gold_in_4096():
    """Through codec.prepare with llama.cpp counting the prompt: the budget is the context left,
    the gold answer is admitted, and prompt + max_tokens <= n_ctx."""
    from memworker.inference import codec
    from memworker.inference.backends import LlamaCppBackend
    from memworker.prompts import render, to_chatml
    from memworker.registry import embedded_gguf_path

    backend = LlamaCppBackend(embedded_gguf_path(), n_ctx=N_CTX, n_threads=1)
    inputs = window()
    prompt = backend.count_tokens(to_chatml(render("extract", inputs)))
    assert abs(prompt - PROMPT_TOKENS) <= 8  # llama.cpp and HF tokenize alike
    request = codec.prepare("extract", inputs, backend=backend)
    assert prompt + request.max_tokens <= N_CTX
    assert not list(jsonschema.Draft202012Validator(request.schema).iter_errors(gold()))
