"""Speed paths of LlamaCppBackend: prefix KV reuse (memworker.inference.kv_prefix) and the
argmax-first grammar sampler (memworker.inference.greedy_grammar).

The slow tests run the real embedded GGUF: the same mixed-task request sequence through a backend
that evaluates every prompt from scratch with llama-cpp-python's own sampler (kv_cache="off",
greedy_grammar=False), through the prefix cache alone and through prefix cache + argmax-first
sampler must give byte-identical texts at temperature 0, and both paths must really have been
used. A changed prompt prefix must reuse only the tokens that are still shared."""

from __future__ import annotations

import numpy as np
import pytest

from memworker.inference import codec
from memworker.inference.backends import BackendError, LlamaCppBackend
from memworker.inference.greedy_grammar import GreedyGrammarSampler
from memworker.inference.kv_prefix import common_prefix
from memworker.inference.samples import SAMPLES
from memworker.registry import embedded_gguf_path

MAX_TOKENS = 64  # enough to cover several JSON fields; keeps the slow tier short


def test_common_prefix():
    a = np.array([1, 2, 3, 4], dtype=np.intc)
    assert common_prefix(a, np.array([1, 2, 9], dtype=np.intc)) == 2
    assert common_prefix(a, a[:2]) == 2
    assert common_prefix(a, np.array([7], dtype=np.intc)) == 0
    assert common_prefix(a, np.array([], dtype=np.intc)) == 0


def test_unknown_kv_cache_mode_is_refused():
    with pytest.raises(BackendError, match="kv_cache must be one of"):
        LlamaCppBackend(embedded_gguf_path(), kv_cache="sometimes")


def mixed_requests(backend) -> list[codec.Request]:
    """e0 c0 r0 e1 c1 r1 e2 c2 r2 e0 c0 r0: tasks alternate on every call."""
    order = [(task, i) for i in (0, 1, 2, 0) for task in ("extract", "consolidate", "reflect")]
    return [codec.prepare(task, SAMPLES[task][i], backend=backend, budget_tokens=240)
            for task, i in order]


def texts(backend, requests, messages=None) -> list[str]:
    out = []
    for k, request in enumerate(requests):
        gen = backend.generate(messages[k] if messages else request.messages,
                               schema=request.schema, grammar=request.grammar,
                               max_tokens=min(request.max_tokens, MAX_TOKENS))
        out.append(gen.text)
    return out


MODES = {"off": ("off", False), "prefix only": ("prefix", False), "prefix": ("prefix", True)}


@pytest.fixture(scope="module")
def backends():
    made = {name: LlamaCppBackend(embedded_gguf_path(), n_ctx=2048, n_threads=2, kv_cache=kv,
                                  greedy_grammar=greedy)
            for name, (kv, greedy) in MODES.items()}
    yield made
    for backend in made.values():
        backend.llm.close()


@pytest.mark.slow
def test_cached_outputs_are_byte_identical_to_uncached(backends):
    requests = mixed_requests(backends["off"])
    reference = texts(backends["off"], requests)
    assert all(reference), reference
    assert texts(backends["prefix only"], requests) == reference
    cached = backends["prefix"]
    cached.prefix_cache.clear()
    before = cached.prefix_cache.stats.hits
    assert texts(cached, requests) == reference
    sampler = cached.llm._sampler
    assert isinstance(sampler, GreedyGrammarSampler)
    assert sampler.tokens > 0 and sampler.full_passes < sampler.tokens
    stats = cached.prefix_cache.stats
    # one shared prefix per task learned on the task's 2nd request, restored from its 3rd on
    assert stats.stored >= 3 and stats.hits - before >= 6, stats
    assert stats.restored_tokens >= 6 * 250, stats


@pytest.mark.slow
def test_cache_reuses_only_what_a_changed_prefix_still_shares(backends):
    off, cached = backends["off"], backends["prefix"]
    cache, llm = cached.prefix_cache, cached.llm
    cache.clear()
    extract = [codec.prepare("extract", SAMPLES["extract"][i], backend=off, budget_tokens=240)
               for i in (0, 1, 2)]
    other = codec.prepare("consolidate", SAMPLES["consolidate"][0], backend=off, budget_tokens=240)
    texts(cached, extract[:2])          # learns system + extract instructions
    assert len(cache.entries) == 1
    key = cache.entries[0].key
    changed_late = _edit(extract[2].messages, "user", "An empty list is a good answer.",
                         "An empty list is a fine answer.")
    changed_system = _edit(extract[2].messages, "system", "You are mem-worker",
                           "You are the memory worker")
    for messages in (changed_late, changed_system):
        texts(cached, [other])          # the context now holds another task's prompt
        live = common_prefix(np.asarray(llm.input_ids[:llm.n_tokens]), key)
        hits, restored = cache.stats.hits, cache.stats.restored_tokens
        gen = cached.generate(messages, schema=extract[2].schema, grammar=extract[2].grammar,
                              max_tokens=MAX_TOKENS)
        [want] = texts(off, [extract[2]], [messages])
        assert gen.text == want
        prompt = np.asarray(llm.input_ids[:gen.prompt_tokens])
        shared = common_prefix(key, prompt)
        assert shared < len(key)        # the edit is inside the stored prefix
        if messages is changed_late:    # system + most instructions still shared: reused
            assert cache.stats.hits == hits + 1
            assert cache.stats.restored_tokens - restored == shared - live > 150
        else:                           # only the first few tokens shared: nothing restored
            assert shared < 10
            assert (cache.stats.hits, cache.stats.restored_tokens) == (hits, restored)


def _edit(messages, role, old, new):
    out = [dict(m) for m in messages]
    [m] = [m for m in out if m["role"] == role]
    assert old in m["content"]
    m["content"] = m["content"].replace(old, new)
    return out
