"""Speed paths of LlamaCppBackend: prefix KV reuse (memworker.inference.kv_prefix) and the
argmax-first grammar sampler (memworker.inference.greedy_grammar).

The slow tests run the real embedded GGUF: the same mixed-task request sequence through a backend
that evaluates every prompt from scratch with llama-cpp-python's own sampler (kv_cache="off",
greedy_grammar=False), through the prefix cache alone and through prefix cache + argmax-first
sampler must give byte-identical texts at temperature 0, and both paths must really have been
used. A changed prompt prefix must reuse only the tokens that are still shared."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from memworker.inference import codec
from memworker.inference.backends import BackendError, LlamaCppBackend
from memworker.inference.samples import SAMPLES
from memworker.prompts import template
from memworker.registry import embedded_gguf_path

MAX_TOKENS = 64  # enough to cover several JSON fields; keeps the slow tier short


def test_common_prefix():
    from memworker.inference.kv_prefix import common_prefix

    a = np.array([1, 2, 3, 4], dtype=np.intc)
    assert common_prefix(a, np.array([1, 2, 9], dtype=np.intc)) == 2
    assert common_prefix(a, a[:2]) == 2
    assert common_prefix(a, np.array([7], dtype=np.intc)) == 0
    assert common_prefix(a, np.array([], dtype=np.intc)) == 0


def test_unknown_kv_cache_mode_is_refused():
    with pytest.raises(BackendError, match="kv_cache must be one of"):
        LlamaCppBackend(embedded_gguf_path(), kv_cache="sometimes")


@pytest.fixture(scope="module")
def vocab_model():
    from llama_cpp import Llama

    llm = Llama(model_path=str(embedded_gguf_path()), vocab_only=True, verbose=False)
    yield llm
    llm.close()


def full_filter_greedy(llm, grammar: str, prefix: list[int], logits: np.ndarray) -> int:
    """llama-cpp-python's path: the grammar filters the whole vocabulary, greedy picks."""
    import llama_cpp
    from llama_cpp._internals import LlamaSampler
    from llama_cpp.llama_grammar import LlamaGrammar

    sampler = LlamaSampler()
    sampler.add_grammar(llm._model, LlamaGrammar.from_string(grammar, verbose=False))
    sampler.add_greedy()
    for token in prefix:
        sampler.accept(token)
    data = np.zeros(len(logits), dtype=np.dtype([("id", np.intc), ("logit", np.single),
                                                 ("p", np.single)], align=True))
    data["id"], data["logit"] = np.arange(len(logits)), logits
    array = llama_cpp.llama_token_data_array(
        data=data.ctypes.data_as(llama_cpp.llama_token_data_p), size=len(logits), selected=-1,
        sorted=False)
    llama_cpp.llama_sampler_apply(sampler.sampler, ctypes.byref(array))
    token = int(data["id"][array.selected])
    sampler.close()
    return token


@pytest.mark.slow
def test_argmax_first_picks_what_full_filtering_picks(vocab_model):
    """Random logits with many ties (small integers), a grammar that allows a few words: the
    argmax-first sampler and llama.cpp's full-vocabulary filter + greedy pick the same token,
    whether the argmax is allowed, an allowed token is among the top 64 / 2,048, or only the
    whole vocabulary has one (ties at the boundary included)."""
    from memworker.inference.greedy_grammar import GreedyGrammarSampler

    llm = vocab_model
    grammar = 'root ::= ("yes" | "no" | "maybe") " please"'
    rng = np.random.default_rng(0)
    n_vocab = llm.n_vocab()
    yes = llm.tokenize(b"yes", add_bos=False, special=False)
    assert len(yes) == 1
    paths = {"argmax": 0, "top": 0, "full": 0}
    for trial in range(200):
        prefix = [] if trial % 2 == 0 else yes  # after "yes" only " please" may follow
        allowed = (llm.tokenize(b" please", add_bos=False, special=False) if prefix
                   else llm.tokenize(b"no", add_bos=False, special=False))[0]
        logits = rng.integers(-3, 3, size=n_vocab).astype(np.single)  # ties everywhere
        kind = trial // 2 % 5
        if kind == 0:      # the allowed token is the argmax
            logits[allowed] = 10.0
        elif kind == 1:    # a (probably) disallowed argmax, the allowed token second
            logits[rng.integers(n_vocab)] = 10.0
            logits[allowed] = 9.0
        elif kind == 2:    # 500 tokens above the allowed one: among the top 2,048, not the top 64
            logits[rng.choice(n_vocab, 500, replace=False)] = 10.0
            logits[allowed] = 9.0
        elif kind == 3:    # allowed tokens tie for second place: the lowest id wins
            logits[rng.integers(n_vocab)] = 10.0
            logits[allowed] = 9.0
            if not prefix:
                logits[[yes[0], llm.tokenize(b"maybe", add_bos=False, special=False)[0]]] = 9.0
        # kind 4: random logits, allowed tokens tie with thousands of others
        sampler = GreedyGrammarSampler(llm._model.vocab, n_vocab, grammar)
        for token in prefix:
            sampler.accept(token)
        got = sampler.choose(logits)
        assert got == full_filter_greedy(llm, grammar, prefix, logits), (trial, kind)
        paths["full" if sampler.full_passes else "top" if sampler.top_passes else "argmax"] += 1
        sampler.close()
    assert all(paths.values()), paths  # every path taken at least once


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
    from memworker.inference.greedy_grammar import GreedyGrammarSampler

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
    # (e2 c2 r2 e0 c0 r0), each time at least the task's instruction block
    assert stats.stored >= 3 and stats.hits - before >= 6, stats
    instructions = sum(cached.count_tokens(template(task.upper()).split("{{")[0])
                       for task in ("extract", "consolidate", "reflect"))
    assert stats.restored_tokens >= 2 * instructions - 6 * 8, (stats, instructions)


@pytest.mark.slow
def test_cache_reuses_only_what_a_changed_prefix_still_shares(backends):
    from memworker.inference.kv_prefix import common_prefix

    off, cached = backends["off"], backends["prefix"]
    cache, llm = cached.prefix_cache, cached.llm
    cache.clear()
    extract = [codec.prepare("extract", SAMPLES["extract"][i], backend=off, budget_tokens=240)
               for i in (0, 1, 2)]
    other = codec.prepare("consolidate", SAMPLES["consolidate"][0], backend=off, budget_tokens=240)
    texts(cached, extract[:2])          # learns system + extract instructions
    assert len(cache.entries) == 1
    key = cache.entries[0].key
    changed_late = _edit(extract[2].messages, "user", '- Nothing durable: {"claims":[]} is fine.',
                         '- Nothing durable: {"claims":[]} is good.')
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
            assert cache.stats.restored_tokens - restored == shared - live > 100
        else:                           # only the first few tokens shared: nothing restored
            assert shared < 10
            assert (cache.stats.hits, cache.stats.restored_tokens) == (hits, restored)


def _edit(messages, role, old, new):
    out = [dict(m) for m in messages]
    [m] = [m for m in out if m["role"] == role]
    assert old in m["content"]
    m["content"] = m["content"].replace(old, new)
    return out


@pytest.mark.slow
def test_recorded_logprobs_spell_the_same_answer(backends):
    """`record_logprobs`: the same text as without it, its pieces spelling the text, each a
    log-probability; none where the argmax-first sampler is not used (no grammar)."""
    requests = mixed_requests(backends["off"])[:3]
    reference = texts(backends["off"], requests)
    recorder = LlamaCppBackend(embedded_gguf_path(), n_ctx=2048, n_threads=2,
                               record_logprobs=True)
    try:
        for request, want in zip(requests, reference, strict=True):
            gen = recorder.generate(request.messages, schema=request.schema,
                                    grammar=request.grammar,
                                    max_tokens=min(request.max_tokens, MAX_TOKENS))
            assert gen.text == want
            assert len(gen.token_logprobs) == gen.completion_tokens
            assert "".join(piece for piece, _ in gen.token_logprobs) == gen.text
            assert all(lp <= 0.0 for _, lp in gen.token_logprobs)
            assert any(lp < 0.0 for _, lp in gen.token_logprobs)
        free = recorder.generate(requests[0].messages, schema=None, grammar=None, max_tokens=8)
        assert free.token_logprobs is None
        assert backends["prefix"].generate(
            requests[0].messages, schema=requests[0].schema, grammar=requests[0].grammar,
            max_tokens=8).token_logprobs is None          # not asked for: not recorded
    finally:
        recorder.llm.close()


#: a window of four user turns (the samples have two at most)
FOUR_TURNS = {
    "episode_id": "read-once",
    "events": [
        {"index": 0, "role": "user", "timestamp": "2025-03-02T08:10:00+01:00", "trusted": True,
         "text": "Morning! Just moved into a flat in Ghent, near the Korenmarkt."},
        {"index": 1, "role": "assistant", "timestamp": "2025-03-02T08:10:05+01:00",
         "trusted": True, "text": "Congratulations on the move! How is the new place?"},
        {"index": 2, "role": "user", "timestamp": "2025-03-02T08:11:00+01:00", "trusted": True,
         "text": "Small but fine. My sister Ines helped me carry everything up."},
        {"index": 3, "role": "user", "timestamp": "2025-03-02T08:12:00+01:00", "trusted": True,
         "text": "I start at the bakery on Monday, early shifts."},
        {"index": 4, "role": "user", "timestamp": "2025-03-02T08:13:00+01:00", "trusted": True,
         "text": "oh and I'm allergic to cats so no pets lol"},
    ],
    "existing_facts": [],
}


@pytest.mark.slow
def test_read_once_turns_reuse_the_window_and_answer_as_fresh(backends):
    """The turns form read once (`memworker.turns` "Read once", `codec.run_turns(history=
    "none")`): every turn's prompt is the window with its own question, so a backend keeping the
    common prefix evaluates the window once, at the first turn, in a batch, and each later turn
    only its question; no answer's cells, decoded one token at a time, are read back. The answers
    are byte-identical to evaluating every prompt from scratch (llama-cpp-python's own sampler),
    turn by turn, on three windows (proposing: every turn writes a claim)."""
    from memworker import turns
    from memworker.eval.bench import DecodeTimer

    off, cached = backends["off"], backends["prefix"]
    timer = DecodeTimer(cached.llm)
    later = []
    for inputs in (SAMPLES["extract"][0], SAMPLES["extract"][2], FOUR_TURNS):
        for k, turn in enumerate(turns.asked(inputs["events"])):
            messages = turns.once_messages(inputs, k)
            assert messages[:-1] == turns.messages(inputs)[:-1]
            request = codec._turn_request(off, inputs, turn.event, messages, True, MAX_TOKENS,
                                          propose=True)
            [want] = texts(off, [request])
            timer.clear()
            [got] = texts(cached, [request])
            assert got == want, (inputs["episode_id"], k)
            evaluated = sum(n for n, _ in timer.batches)
            if k:   # the window's cells kept from the first turn: its question alone evaluated
                prompt = cached.count_tokens(cached.render_prompt(messages))
                later.append(evaluated)
                assert 0 < evaluated < 40 and evaluated * 10 < prompt, (evaluated, prompt)
    assert len(later) == 1 + 1 + 3


@pytest.mark.slow
def test_omitting_worker_reuses_cells_as_fresh_evaluation(backends):
    """The prompts of the worker that leaves unasked turns out (`codec.run_turns(tail="omit")`,
    built by `turns.messages(only=)` as the codec builds them): a later asked turn's prompt holds
    the earlier asked turn's answer right after its question; the prefix cache keeps the
    window's cells and evaluates that answer again from its text. Every asked turn's answer is
    byte-identical to evaluating its prompt from scratch (kv cache off), turn by turn (one window
    with its timestamps to the minute)."""
    from memworker import turns
    from memworker.prompts import restamp

    off, cached = backends["off"], backends["prefix"]
    asked = turns.asked(FOUR_TURNS["events"])
    n = len(asked)
    for ask, stamps in (([True] + [False] * (n - 2) + [True], "full"),
                        ([False] + [True] * (n - 1), "minute")):
        only = [k for k, a in enumerate(ask) if a]
        shown = turns.shown_upto(FOUR_TURNS, asked[only[-1]].event)
        answers = []
        for j, k in enumerate(only):
            messages = restamp(turns.messages(shown, answers, only=only[:j + 1]), shown,
                               stamps)
            assert len(messages) == 2 + 2 * j      # no unasked turn in the conversation
            request = codec._turn_request(off, FOUR_TURNS, asked[k].event, messages, True,
                                          MAX_TOKENS, propose=True)
            [want] = texts(off, [request])
            [got] = texts(cached, [request])
            assert got == want, (ask, stamps, k)
            answers.append(want)
