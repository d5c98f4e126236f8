"""Greedy decoding under a grammar without filtering the whole vocabulary on every token.

llama-cpp-python samples with the chain [penalties, grammar, greedy]: on every token llama.cpp's
grammar sampler checks all 49,152 (SmolLM2) candidate tokens against the grammar, then greedy
takes the best survivor. At temperature 0 the answer is the same if one first takes the argmax
of the raw logits and asks the grammar about that one token only; the whole vocabulary is
filtered only when the grammar rejects it (llama.cpp's own common/sampling.cpp does this
"grammar second" check). Ties resolve the same way (the lowest token id among the best logits,
as llama.cpp's greedy sampler does), so the tokens are identical (tests/test_kv_prefix.py
compares the texts with llama-cpp-python's own sampler).
"""

from __future__ import annotations

import ctypes
import math

import llama_cpp
import numpy as np


class GreedyGrammarSampler:
    """Stands in for llama-cpp-python's `LlamaSampler` (`sample(ctx, idx)`) at temperature 0
    with a grammar and neutral penalties."""

    def __init__(self, vocab, n_vocab: int, grammar: str, root: str = "root"):
        self.n_vocab = n_vocab
        self.grammar = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"),
                                                            root.encode("utf-8"))
        if not self.grammar:
            raise ValueError("llama.cpp rejected the grammar (its parser printed the reason)")
        self._one = (llama_cpp.llama_token_data * 1)()
        self._one_array = llama_cpp.llama_token_data_array(
            data=ctypes.cast(self._one, llama_cpp.llama_token_data_p), size=1, selected=-1,
            sorted=False)
        self._all = np.zeros(n_vocab, dtype=np.dtype(
            [("id", np.intc), ("logit", np.single), ("p", np.single)], align=True))
        self._all_array = llama_cpp.llama_token_data_array(
            data=self._all.ctypes.data_as(llama_cpp.llama_token_data_p), size=n_vocab,
            selected=-1, sorted=False)
        self._ids = np.arange(n_vocab, dtype=np.intc)
        self.full_passes = 0     # tokens for which the argmax was rejected
        self.tokens = 0

    def sample(self, ctx, idx: int = -1) -> int:
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx.ctx, idx),
                                       shape=(self.n_vocab,))
        token = int(np.argmax(logits))
        self._one[0].id, self._one[0].logit, self._one[0].p = token, float(logits[token]), 0.0
        self._one_array.size, self._one_array.selected = 1, -1
        llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(self._one_array))
        if self._one[0].logit == -math.inf:
            self._all["id"] = self._ids
            self._all["logit"] = logits
            self._all["p"] = 0.0
            self._all_array.size, self._all_array.selected = self.n_vocab, -1
            llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(self._all_array))
            token = int(self._all["id"][int(np.argmax(self._all["logit"]))])
            self.full_passes += 1
        llama_cpp.llama_sampler_accept(self.grammar, token)
        self.tokens += 1
        return token

    def close(self) -> None:
        if self.grammar:
            llama_cpp.llama_sampler_free(self.grammar)
            self.grammar = None

    def __del__(self) -> None:
        self.close()
