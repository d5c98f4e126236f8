"""The corpus and the codec agree: every training target is an answer the deployed codec can
produce and accepts unchanged. Gold wire answers validate under the per-request dynamic schema,
the strict grammar accepts their exact bytes, and decoding them gives back the gold canonical
answer (dates recomputed by the resolver included)."""

import json

import jsonschema
import pytest

from memworker import wire
from memworker.corpus import build_corpus, load_rows
from memworker.inference.codec import decode
from memworker.inference.grammar import schema_to_gbnf
from memworker.inference.schema import build_schema
from tests.gbnf import accepts


@pytest.fixture(scope="module", params=["general", "coding"])
def corpus_rows(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"corpus-{request.param}")
    build_corpus(out, seed=21, episodes=60, domain=request.param, count_tokens=False)
    canonical = {r["id"]: r for s in ("train", "val", "test") for r in load_rows(out, s, "canonical")}
    wire = [r for s in ("train", "val", "test") for r in load_rows(out, s, "wire")]
    assert len(wire) == len(canonical) >= 150
    return [(canonical[w["id"]], w) for w in wire]


def test_gold_targets_fit_the_dynamic_schema_and_decode_to_gold(corpus_rows):
    for row, wire_row in corpus_rows:
        answer = wire_row["messages"][2]["content"]
        schema = build_schema(row["task"], row["input"])
        jsonschema.validate(json.loads(answer), schema)
        result = decode(row["task"], row["input"], answer, schema=schema)
        # all but what the codec derives (wire v3); the generated gold's confidence agrees too
        assert wire.comparable_answer(row["task"], result.output) == wire.comparable_answer(
            row["task"], row["gold"]), row["id"]
        if row["task"] == "extract":
            assert [c["confidence"] for c in result.output["claims"]] == [
                c["confidence"] for c in row["gold"]["claims"]], row["id"]


def test_grammar_accepts_the_exact_bytes_of_gold_targets(corpus_rows):
    tasks_seen = set()
    for row, wire_row in corpus_rows[::4]:
        schema = build_schema(row["task"], row["input"])
        assert accepts(schema_to_gbnf(schema), wire_row["messages"][2]["content"]), row["id"]
        tasks_seen.add(row["task"])
    assert tasks_seen == {"extract", "consolidate", "reflect"}
