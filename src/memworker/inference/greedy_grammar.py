"""Greedy decoding under a grammar without filtering the whole vocabulary on every token.

llama-cpp-python samples with the chain [penalties, grammar, greedy]: on every token llama.cpp's
grammar sampler checks all 49,152 (SmolLM2) candidate tokens against the grammar, then greedy
takes the best survivor. At temperature 0 the answer is the same if one first takes the argmax
of the raw logits and asks the grammar about that one token only (llama.cpp's own
common/sampling.cpp does this "grammar second" check). When the grammar rejects it, the 64 best
tokens are filtered in one call and the best allowed one is taken, then the 2,048 best
(`TOP_KS`); only when none of them is allowed (or the best allowed one ties with the K-th logit,
so a token left out could tie with it) is the whole vocabulary filtered. Filtering does not change the grammar's state, so the order of
the checks does not matter, and ties resolve as llama.cpp's greedy sampler resolves them (the
lowest token id among the best logits): the tokens are identical (tests/test_kv_prefix.py compares
the texts with llama-cpp-python's own sampler).
"""

from __future__ import annotations

import ctypes
import math

import llama_cpp
import numpy as np

TOP_KS = (64, 2048)  # candidates filtered when the argmax is rejected, then all


class GrammarDeadEnd(ValueError):
    """The grammar allows no token of the vocabulary here. llama.cpp's own [grammar, greedy]
    chain would then take token 0 and abort the process ("Unexpected empty grammar stack after
    accepting piece"; met with Gemma 3, whose token 0 is `<pad>`); this sampler raises instead,
    so the backend reports the request as failed (a ValueError becomes its BackendError) and
    the process, and every answer already recorded, survive."""


class GreedyGrammarSampler:
    """Stands in for llama-cpp-python's `LlamaSampler` (`sample(ctx, idx)`) at temperature 0
    with a grammar and neutral penalties."""

    def __init__(self, vocab, n_vocab: int, grammar: str, root: str = "root", *,
                 record: bool = False):
        self.n_vocab = n_vocab
        #: with `record`, (token, log-probability) of every sampled token: the log-softmax of the
        #: raw logits before the grammar (the model's own belief, not renormalised over what the
        #: grammar allows); the choice itself does not change
        self.record = record
        self.sampled: list[tuple[int, float]] = []
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
        self._ks = tuple(k for k in TOP_KS if k < n_vocab)
        self._top = np.zeros(max(TOP_KS), dtype=self._all.dtype)
        self._top_array = llama_cpp.llama_token_data_array(
            data=self._top.ctypes.data_as(llama_cpp.llama_token_data_p), size=max(TOP_KS),
            selected=-1, sorted=False)
        self.tokens = 0
        self.top_passes = 0      # tokens whose argmax the grammar rejected
        self.full_passes = 0     # ... and no allowed token was among the max(TOP_KS) best either

    def sample(self, ctx, idx: int = -1) -> int:
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx.ctx, idx),
                                       shape=(self.n_vocab,))
        token = self.choose(logits)
        if self.record:
            top = float(np.max(logits))
            log_z = top + math.log(float(np.sum(np.exp(logits - top, dtype=np.float64))))
            self.sampled.append((token, float(logits[token]) - log_z))
        self.accept(token)
        return token

    def choose(self, logits: np.ndarray) -> int:
        """The token llama.cpp's [grammar, greedy] chain would pick from `logits` now."""
        self.tokens += 1
        token = int(np.argmax(logits))
        if self._allowed(token, logits):
            return token
        self.top_passes += 1
        for k in self._ks:
            token = self._best_of_top(logits, k)
            if token >= 0:
                return token
        return self._best_of_all(logits)

    def accept(self, token: int) -> None:
        llama_cpp.llama_sampler_accept(self.grammar, token)

    def _allowed(self, token: int, logits: np.ndarray) -> bool:
        self._one[0].id, self._one[0].logit, self._one[0].p = token, float(logits[token]), 0.0
        self._one_array.size, self._one_array.selected = 1, -1
        llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(self._one_array))
        return self._one[0].logit != -math.inf

    def _best_of_top(self, logits: np.ndarray, k: int) -> int:
        """The best grammar-allowed token among the k highest logits, or -1 when none is
        allowed or the best allowed one ties with the k-th logit (a token left out could then
        tie with it and have a lower id)."""
        top = np.argpartition(logits, self.n_vocab - k)[self.n_vocab - k:]
        top = top[np.lexsort((top, -logits[top]))]        # best first, lower id first on ties
        cand = self._top[:k]
        cand["id"] = top
        cand["logit"] = logits[top]
        cand["p"] = 0.0
        self._top_array.size, self._top_array.selected = k, -1
        llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(self._top_array))
        allowed = np.flatnonzero(cand["logit"] != -math.inf)
        if allowed.size == 0 or logits[top[allowed[0]]] <= logits[top[-1]]:
            return -1
        return int(top[allowed[0]])

    def _best_of_all(self, logits: np.ndarray) -> int:
        self._all["id"] = self._ids
        self._all["logit"] = logits
        self._all["p"] = 0.0
        self._all_array.size, self._all_array.selected = self.n_vocab, -1
        llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(self._all_array))
        self.full_passes += 1
        token = int(np.argmax(self._all["logit"]))
        if self._all["logit"][token] == -math.inf:
            raise GrammarDeadEnd(f"the grammar allows no token of the {self.n_vocab} after "
                                 f"{self.tokens - 1} answer tokens (a dead end of the grammar "
                                 "for this vocabulary); the request is refused, not decoded")
        return token

    def close(self) -> None:
        grammar, self.grammar = getattr(self, "grammar", None), None
        if grammar:
            llama_cpp.llama_sampler_free(grammar)

    def __del__(self) -> None:
        self.close()
