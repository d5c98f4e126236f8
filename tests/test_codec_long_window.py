"""Long extract windows (corpus v2: 6-24 events, ~400-1,300 event tokens): a realistic gold answer
of 8 claims with 3 quotes each, values <= 80 and statements <= 160 characters, stays
representable under the dynamic schema within n_ctx 4096, and max_tokens never runs past the
context left."""

from __future__ import annotations

import jsonschema
import pytest

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
#: event lines); re-measured by the slow test below
PROMPT_TOKENS = 1722


def window() -> dict:
    events = [{"index": i, "role": "user" if i % 2 == 0 else "assistant",
               "timestamp": f"2025-10-08T09:{i:02d}:00+02:00",
               "text": f"{SENTENCES[i % 5]} {TAILS[i % 4]}", "trusted": True}
              for i in range(24)]
    facts = [{"id": f"F{k}", "statement": "The user lives in Porto.", "valid_from": "2024-01"}
             for k in range(1, 5)]
    return {"episode_id": "w24", "events": events, "existing_facts": facts}


def gold() -> dict:
    """8 claims x 3 sentence quotes; value 70 and statement 150 characters."""
    claims = []
    for k in range(8):
        quotes = [{"event": (3 * k + j) % 24, "quote": SENTENCES[(3 * k + j) % 24 % 5]}
                  for j in range(3)]
        claims.append({
            "quotes": quotes, "subject": {"name": "Maria, the user's sister", "type": "person"},
            "predicate": "visits_user_on",
            "value": "visiting the user in Lisbon for the weekend, staying in the spare room",
            "statement": "The user's sister Maria is coming to visit the user in Lisbon next "
                         "Friday and will stay in the spare room, which the user plans to clear "
                         "on Wednesday.",
            "kind": "plan", "time_expression": "next Friday", "correction": False,
            "supersedes": ["F1"], "confidence": "high"})
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
    assert max(len(c["value"]) for c in answer["claims"]) <= 80
    assert max(len(c["statement"]) for c in answer["claims"]) <= 160
    left = N_CTX - PROMPT_TOKENS
    schema = build_schema("extract", inputs, budget_tokens=left)
    claims = schema["properties"]["claims"]
    props = claims["items"]["properties"]
    assert (claims["maxItems"], props["quotes"]["maxItems"]) == (8, 3)
    assert (props["value"]["maxLength"], props["statement"]["maxLength"]) == (80, 160)
    assert typical_tokens(schema) <= left
    assert not list(jsonschema.Draft202012Validator(schema).iter_errors(answer))
    assert Matcher(schema_to_gbnf(schema)).accepts(dump_answer("extract", answer))
    _bounded(schema)
    # the hard cap: never more than the context left, whatever the worst case
    assert worst_case_chars(schema) > 3 * left
    assert max_tokens_for(schema, context_left=left) == left


def test_a_fuller_context_still_shrinks_the_schema_rather_than_overflow():
    inputs = window()
    schema = build_schema("extract", inputs, budget_tokens=1200)
    claims = schema["properties"]["claims"]
    assert claims["maxItems"] < 8 and typical_tokens(schema) <= 1200
    _bounded(schema)
    assert max_tokens_for(schema, context_left=1200) == 1200


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
