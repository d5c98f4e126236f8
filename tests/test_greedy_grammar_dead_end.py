"""A grammar that allows no token of the vocabulary (met with Gemma 3: llama.cpp's own chain then
takes token 0, `<pad>`, and aborts the process) is refused with a ValueError, which the llama.cpp
backend reports as a BackendError, so the evaluator records the row as failed and goes on. No
model: the grammar's filter is stood in for by one that rejects every candidate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memworker.inference import greedy_grammar as gg


def _sampler(n_vocab: int = 8) -> gg.GreedyGrammarSampler:
    s = object.__new__(gg.GreedyGrammarSampler)   # the arrays of __init__, without a vocab
    s.n_vocab, s.record, s.sampled, s.grammar = n_vocab, False, [], None
    dtype = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)
    s._one = np.zeros(1, dtype=dtype)
    s._all = np.zeros(n_vocab, dtype=dtype)
    s._ids = np.arange(n_vocab, dtype=np.intc)
    s._ks = ()
    s.tokens = s.top_passes = s.full_passes = 0
    return s


class _Rejecting:
    """Stands in for llama.cpp's grammar filter: every candidate -inf, or all but `allow`."""

    def __init__(self, s: gg.GreedyGrammarSampler, allow: int | None = None):
        self.s, self.allow = s, allow

    def _one_allowed(self, token: int, logits: np.ndarray) -> bool:
        return token == self.allow

    def _best_of_all_apply(self) -> None:
        keep = self.s._all["id"] == (self.allow if self.allow is not None else -1)
        self.s._all["logit"][~keep] = -math.inf


@pytest.mark.parametrize("allow", [None, 5])
def test_a_dead_end_is_refused_and_an_allowed_token_is_still_taken(monkeypatch, allow):
    s = _sampler()
    stand_in = _Rejecting(s, allow)
    monkeypatch.setattr(s, "_allowed", stand_in._one_allowed)
    monkeypatch.setattr(gg.llama_cpp, "llama_sampler_apply",
                        lambda grammar, array: stand_in._best_of_all_apply())
    monkeypatch.setattr(gg.ctypes, "byref", lambda x: x)
    s._all_array = type("Array", (), {"size": 0, "selected": -1})()
    logits = np.arange(8, dtype=np.single)[::-1].copy()   # token 0 is the argmax
    if allow is None:
        with pytest.raises(gg.GrammarDeadEnd, match="allows no token of the 8") as info:
            s.choose(logits)
        assert isinstance(info.value, ValueError)   # the backend's `except ValueError`
    else:
        assert s.choose(logits) == allow and s.full_passes == 1
