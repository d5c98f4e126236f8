"""llama-cpp-python's `Llama` with the two speed hooks of `LlamaCppBackend`.

- `generate` first lets a `PrefixCache` (memworker.inference.kv_prefix) put the stored prefix
  that best matches the prompt into the context; llama-cpp-python's own n_past logic then reuses
  it as if it had been the previous prompt.
- `_init_sampler` returns a `GreedyGrammarSampler` (memworker.inference.greedy_grammar) for
  temperature 0 with a grammar and neutral penalties: argmax first, whole-vocabulary grammar
  filtering only when the grammar rejects the argmax. Same tokens, less work per token.

Both are off when their argument is None / False. With `record_logprobs` the argmax-first
  sampler also keeps each sampled token's log-probability (`last_sampler.sampled`): what
  `LlamaCppBackend(record_logprobs=True)` returns as `Generation.token_logprobs`.

- `extra_bufts=False` (default) loads the weights without llama.cpp's extra CPU buffer types
  (`llama_model_params.use_extra_bufts`, which llama-cpp-python does not expose): on this
  project's Firecracker VMs the CPU reports AMX, llama.cpp built with -march=native uses its AMX
  buffer type, and the first matrix multiply dies with SIGILL (`tilezero` in
  `ggml_backend_amx_mul_mat`, seen on 2026-11-30 with llama-cpp-python 0.3.36). Without the
  extra buffer types llama.cpp uses its ordinary AVX2/AVX-512 kernels. Pass True where AMX works.
"""

from __future__ import annotations

from contextlib import contextmanager

import llama_cpp
import llama_cpp.llama_cpp as llama_capi

from memworker.inference.greedy_grammar import GreedyGrammarSampler
from memworker.inference.kv_prefix import PrefixCache


@contextmanager
def _model_params(**fields):
    """`Llama.__init__` takes llama.cpp's default model params and sets only the fields it knows;
    set others (`use_extra_bufts`) by wrapping the default for the duration of the load."""
    default = llama_capi.llama_model_default_params

    def patched():
        params = default()
        for name, value in fields.items():
            setattr(params, name, value)
        return params

    llama_capi.llama_model_default_params = patched
    try:
        yield
    finally:
        llama_capi.llama_model_default_params = default


class Llama(llama_cpp.Llama):
    def __init__(self, *args, prefix_cache: PrefixCache | None = None,
                 greedy_grammar: bool = False, extra_bufts: bool = False,
                 record_logprobs: bool = False, **kwargs):
        with _model_params(use_extra_bufts=extra_bufts):
            super().__init__(*args, **kwargs)
        if self.model_params.use_extra_bufts != extra_bufts:
            raise RuntimeError("llama-cpp-python ignored use_extra_bufts: the AMX guard of "
                               "memworker.inference.llama_ext needs updating for this version")
        self.prefix_cache = prefix_cache
        self.greedy_grammar = greedy_grammar
        self.record_logprobs = record_logprobs
        self.last_sampler: GreedyGrammarSampler | None = None

    def generate(self, tokens, *args, **kwargs):
        if self.prefix_cache is not None and kwargs.get("reset", True):
            self.prefix_cache.prepare(self, tokens)
        return (yield from super().generate(tokens, *args, **kwargs))

    def _init_sampler(self, **kwargs):
        grammar = kwargs.get("grammar")
        neutral = (kwargs.get("repeat_penalty", 1.0) == 1.0
                   and kwargs.get("frequency_penalty", 0.0) == 0.0
                   and kwargs.get("presence_penalty", 0.0) == 0.0)
        if (self.greedy_grammar and grammar is not None and kwargs.get("temp") == 0.0
                and kwargs.get("logits_processor") is None and neutral):
            self.last_sampler = GreedyGrammarSampler(self._model.vocab, self._n_vocab,
                                                     grammar._grammar, grammar._root,
                                                     record=self.record_logprobs)
            return self.last_sampler
        self.last_sampler = None
        return super()._init_sampler(**kwargs)
