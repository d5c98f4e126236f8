"""Reuse the KV state of shared prompt prefixes across llama.cpp requests.

Every request is system prompt + task instructions + per-request inputs. llama-cpp-python's
`Llama.generate` already keeps the longest common token prefix with the *previous* prompt
(its n_past logic), but when requests alternate between tasks (extract / consolidate / reflect
have different instruction blocks) that common prefix is only the system prompt, and the task's
instructions are evaluated again on every call.

`PrefixCache` keeps the KV cells of sequence 0 for a few shared prefixes
(`llama_state_seq_get_data`: the KV cells only, no logits; about 23 KB per token for SmolLM2-135M),
keyed by the prefix tokens, and restores the best-matching one right before `Llama.generate`
compares the prompt with what is in the context (`memworker.inference.llama_ext.Llama.generate`,
so it sees the exact prompt tokens that `create_chat_completion` made).

Which prefixes: learned from the requests, not configured. When a prompt shares at least
`min_tokens` leading tokens with an earlier *different* prompt, and no stored prefix already covers
that many (give or take `min_tokens`), the shared part is evaluated, saved, and the rest of the
prompt evaluated after it. Identical prompts never store a whole prompt, so what is kept is what
different requests share: system + task instructions (+ the few tokens after them that two
requests happened to share). At most `max_entries` prefixes and `max_bytes` of states, least
recently used dropped first (a state is 2 × layers × KV heads × head dim × 2 bytes per token
with the default f16 KV cache).

Correctness: a restored state stands for its key tokens only; `Llama.generate` then keeps the
longest common prefix of those with the new prompt and evaluates the rest, exactly as it does for
its own previous prompt. A changed system prompt or template shares fewer tokens, so it reuses
less, never something stale. Outputs are byte-identical to evaluating every prompt from scratch
(tests/test_kv_prefix.py, on the embedded model).
"""

from __future__ import annotations

import ctypes
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import llama_cpp
import numpy as np

SEQ = 0  # llama-cpp-python uses sequence 0 only


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two token arrays."""
    m = min(len(a), len(b))
    diff = np.flatnonzero(a[:m] != b[:m])
    return int(diff[0]) if diff.size else m


@dataclass
class PrefixStats:
    hits: int = 0                 # requests that restored a stored prefix
    restored_tokens: int = 0      # prompt tokens those restores saved from evaluation
    stored: int = 0               # prefixes saved
    evicted: int = 0
    restore_s: float = 0.0        # time spent copying states into the context
    store_s: float = 0.0          # time spent copying states out of it (not the evaluation)

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@dataclass(eq=False)
class _Entry:
    key: np.ndarray               # the prefix tokens
    state: ctypes.Array           # llama_state_seq_get_data bytes for exactly those tokens


@dataclass
class PrefixCache:
    max_entries: int = 8
    max_bytes: int = 512 * 2**20
    min_tokens: int = 32
    history: int = 16
    entries: list[_Entry] = field(default_factory=list)   # most recently used last
    stats: PrefixStats = field(default_factory=PrefixStats)

    def __post_init__(self) -> None:
        self._seen: deque[np.ndarray] = deque(maxlen=self.history)

    def clear(self) -> None:
        self.entries.clear()
        self._seen.clear()

    def nbytes(self) -> int:
        return sum(ctypes.sizeof(e.state) for e in self.entries)

    # -- the hook --------------------------------------------------------------------------------

    def prepare(self, llm: llama_cpp.Llama, tokens: Sequence[int]) -> None:
        """Before `Llama.generate(tokens)`: restore the stored prefix that shares the most tokens
        with `tokens` if it beats what the context already holds; learn a new shared prefix."""
        if getattr(llm, "_is_recurrent", False) or getattr(llm, "_is_hybrid", False):
            return  # recurrent state cannot be cut back to a prefix: nothing to reuse
        toks = np.asarray(tokens, dtype=np.intc)
        live = common_prefix(llm.input_ids[:llm.n_tokens], toks)
        best, best_len = None, 0
        for entry in self.entries:
            n = common_prefix(entry.key, toks)
            if n > best_len:
                best, best_len = entry, n
        if best is not None and best_len > live:
            if self._restore(llm, best):
                self.entries.remove(best)
                self.entries.append(best)
                self.stats.hits += 1
                self.stats.restored_tokens += best_len - live
                live = best_len
            else:
                live = 0
        shared = max((common_prefix(seen, toks) for seen in self._seen
                      if not np.array_equal(seen, toks)), default=0)
        if not any(np.array_equal(seen, toks) for seen in self._seen):
            self._seen.append(toks)
        if shared >= self.min_tokens and shared >= best_len + self.min_tokens and shared < len(toks):
            self._store(llm, toks, live, shared)

    # -- state copies ----------------------------------------------------------------------------

    def _restore(self, llm: llama_cpp.Llama, entry: _Entry) -> bool:
        started = time.perf_counter()
        ctx = llm._ctx.ctx
        llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        n = llama_cpp.llama_state_seq_set_data(ctx, entry.state, ctypes.sizeof(entry.state), SEQ)
        k = len(entry.key)
        if n == 0:  # llama.cpp refused the state: start from an empty context
            llm.n_tokens = 0
            llm._requires_eval = True
            return False
        llm.input_ids[:k] = entry.key
        llm.n_tokens = k
        llm._requires_eval = True  # no logits were restored
        self.stats.restore_s += time.perf_counter() - started
        return True

    def _store(self, llm: llama_cpp.Llama, toks: np.ndarray, live: int, length: int) -> None:
        """Make the context hold exactly toks[:length], then save its KV cells."""
        if live >= length:
            if not llm._ctx.kv_cache_seq_rm(-1, length, -1):
                return
            llm.n_tokens = length
            llm._requires_eval = True
        else:
            llm.n_tokens = live
            llm.eval(toks[live:length].tolist())  # drops cells >= live, then decodes the rest
        started = time.perf_counter()
        ctx = llm._ctx.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, SEQ)
        state = (ctypes.c_uint8 * size)()
        n = llama_cpp.llama_state_seq_get_data(ctx, state, size, SEQ)
        if n == 0:
            return
        if n < size:
            state = (ctypes.c_uint8 * n).from_buffer_copy(state)
        self.entries.append(_Entry(key=toks[:length].copy(), state=state))
        self.stats.stored += 1
        while len(self.entries) > self.max_entries or (len(self.entries) > 1
                                                         and self.nbytes() > self.max_bytes):
            self.entries.pop(0)
            self.stats.evicted += 1
        self.stats.store_s += time.perf_counter() - started
