"""Backends: one small protocol, three real transports, and a replay backend.

Every backend implements

    generate(messages, *, schema, grammar, max_tokens, temperature, seed) -> Generation

`messages` are the chat messages of `memworker.prompts.render` (our system prompt first), `schema`
the request's dynamic JSON schema and `grammar` its GBNF (`memworker.inference.grammar`; None to
decode unconstrained). A backend reports the finish reason as it is ("stop" / "length"); the
codec turns "length" into a truncation error, so nothing here hides a cut-off answer.

- `LlamaCppBackend`: llama.cpp in process (llama-cpp-python). Chat completion with the GGUF's own
  chat template (for the registry bases that template renders exactly `prompts.to_chatml`; tested)
  and `grammar=LlamaGrammar.from_string(gbnf)`. Each grammar is first parsed by llama.cpp itself
  (`check_grammar`), because llama.cpp answers a bad grammar with a NULL sampler, not an error.
  `kv_cache` chooses how much of the KV cache a request reuses: "prefix" (default) keeps the
  shared prompt prefixes (system + task instructions) of recent requests and restores the best
  one (`memworker.inference.kv_prefix`); "last" is llama-cpp-python's own reuse of the common
  prefix with the previous prompt only; "off" evaluates every prompt from scratch. A model with
  sliding-window attention (Gemma 3) always runs "off", and `kv_cache_note` says why: reusing
  cached cells there gave other answers than a fresh evaluation.
  `greedy_grammar` (default on) samples temperature-0 grammar requests argmax-first and filters
  the vocabulary with the grammar only when it rejects the argmax
  (`memworker.inference.greedy_grammar`). Outputs are byte-identical with every combination
  (tests/test_kv_prefix.py). `extra_bufts` (default off) would let llama.cpp use its extra CPU
  buffer types; with them, llama.cpp built with -march=native dies with SIGILL on AMX tile
  instructions on this project's VMs (see `memworker.inference.llama_ext`).
  `record_logprobs` (default off) returns each answer token's log-probability under the model
  (log-softmax of the raw logits, before the grammar) as `Generation.token_logprobs`, `[[piece,
  logprob], ...]` whose pieces join to the text; only on the argmax-first path (temperature 0 with
  a grammar), else None. The answer is the same with and without it (tests/test_kv_prefix.py).
- `OllamaBackend`: the `ollama` client's `generate()` with `raw=True` and
  `prompt=to_chatml(messages)` (the exact training prompt; the Modelfile template is bypassed),
  `format=<schema>`, `think=False`, options temperature / seed / num_ctx / num_predict. Ollama has
  no GBNF parameter: it converts the schema itself, so the codec's validation matters there.
- `OpenAICompatBackend`: `POST {base_url}/chat/completions` with urllib (`post_chat_completion`,
  the one OpenAI-compatible client: the corpus teacher uses this backend too). `base_url` follows
  the OpenAI convention and ends in `/v1` (e.g. `http://127.0.0.1:8000/v1`). With a grammar it sends
  `"grammar": <gbnf>` (llama_cpp.server and llama.cpp's llama-server accept it); without one,
  `response_format={"type": "json_object", "schema": <schema>}`. Never both: llama_cpp.server
  lets response_format override the grammar with its own (unsafe) conversion, and it rejects
  `{"type": "json_schema"}`. It sends `repeat_penalty: 1` (greedy with no penalty, as in process;
  llama_cpp.server's default 1.1 gave another answer to the same request). With `logprobs` it
  asks for each answer token's log-probability (`logprobs: true, top_logprobs: 0`; llama_cpp.server
  answers only when started with `--logits_all true`, and its values then equal llama.cpp's in
  process: the raw logits' log-softmax, before the grammar).
- `OllamaBackend` with `logprobs` sends `logprobs: true` and reads the reply's `logprobs` (Ollama
  0.12.11 or later; tested against its HTTP protocol only, no Ollama runs here).
- `ReplayBackend`: returns given texts in order (re-decoding recorded outputs, tests).

Threads: importing `memworker` sets `OMP_WAIT_POLICY=PASSIVE` unless it is already set, before
llama.cpp's OpenMP runtime starts. With the default (spinning) policy, two llama.cpp threads on a
two-core machine where another process holds a core ran ~25x slower (measured here). Under the
passive policy a small model decodes fastest on one thread, its default (`default_threads`).
"""

from __future__ import annotations

import codecs
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from memworker.inference.grammar import GrammarError
from memworker.prompts import to_chatml

Messages = list[dict[str, str]]


@dataclass
class Generation:
    text: str
    finish_reason: str | None            # "stop", "length", or what the server said
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float | None = None
    backend: str = ""
    #: [[piece, log-probability], ...] of the answer tokens, where the backend records them
    token_logprobs: list[list[Any]] | None = None


class BackendError(RuntimeError):
    """The backend could not produce a generation (server down, model missing, bad reply)."""


@runtime_checkable
class Backend(Protocol):
    name: str

    def generate(self, messages: Messages, *, schema: dict[str, Any] | None, grammar: str | None,
                 max_tokens: int, temperature: float = 0.0, seed: int = 0) -> Generation: ...


#: a GGUF smaller than this decodes fastest on one llama.cpp thread (`default_threads`)
SMALL_MODEL_BYTES = 1 << 30


def default_threads(model_bytes: int | None = None) -> int:
    """llama.cpp threads when none are given: one for a model under `SMALL_MODEL_BYTES`, else
    min(2, cores). For the 135M student (145 MB Q8_0) each token is a few milliseconds of work
    split into hundreds of small operations, and the threads meet at a barrier after each: under
    the passive OpenMP wait policy (`memworker` sets it) a second thread sleeps and is woken at
    every barrier, which made decoding 2.4x slower than one thread (35 against 84 tok/s at a
    900-token context), and spinning instead gained 10 % when idle but lost 2.5x with one busy
    process beside it (inference/README "Threads"). A larger model has more work per operation;
    it keeps the earlier default (not measured here)."""
    if model_bytes is not None and model_bytes < SMALL_MODEL_BYTES:
        return 1
    return max(1, min(2, os.cpu_count() or 1))


# --- llama.cpp in process -------------------------------------------------------------------------

class LlamaCppBackend:
    """llama.cpp through llama-cpp-python, in this process."""

    name = "llama.cpp"

    KV_CACHE_MODES = ("prefix", "last", "off")

    def __init__(self, model_path: str | Path, *, n_ctx: int = 4096, n_threads: int | None = None,
                 seed: int = 0, verbose: bool = False, kv_cache: str = "prefix",
                 greedy_grammar: bool = True, extra_bufts: bool = False,
                 record_logprobs: bool = False):
        if kv_cache not in self.KV_CACHE_MODES:
            raise BackendError(f"kv_cache must be one of {', '.join(self.KV_CACHE_MODES)}, "
                               f"not {kv_cache!r}")
        try:  # here, not at the top: both import llama_cpp, which may not be installed
            from memworker.inference.kv_prefix import PrefixCache
            from memworker.inference.llama_ext import Llama
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise BackendError("llama-cpp-python is not installed: pip install "
                               "'memworker[export]' (it compiles llama.cpp, ~10 min)") from exc
        path = Path(model_path)
        if not path.is_file():
            raise BackendError(f"GGUF file not found: {path}")
        self.model_path = path
        self.n_ctx = n_ctx
        self.kv_cache = kv_cache
        self.prefix_cache = PrefixCache() if kv_cache == "prefix" else None
        try:
            self.llm = Llama(model_path=str(path), n_ctx=n_ctx,
                             n_threads=n_threads or default_threads(path.stat().st_size),
                             seed=seed,
                             verbose=verbose, prefix_cache=self.prefix_cache,
                             greedy_grammar=greedy_grammar, extra_bufts=extra_bufts,
                             record_logprobs=record_logprobs)
        except ValueError as exc:
            raise BackendError(f"llama.cpp could not load {path}: {exc}") from None
        #: why the KV cache mode asked for was not used (None: it was)
        self.kv_cache_note: str | None = None
        window = self.sliding_window() if kv_cache != "off" else 0
        if window > 0:
            # Gemma 3's sliding-window layers: restoring a cached prefix (and llama-cpp-python's
            # reuse of the last prompt's) gave other answers than a fresh evaluation on the
            # natural-dev rows (docs/research/capacity.md "Stage 1, both bases"), so every prompt
            # is evaluated from scratch, as "off" does
            self.kv_cache_note = (f"kv_cache {kv_cache!r} -> 'off': the model has sliding-window "
                                  f"attention ({window} tokens), where reusing "
                                  "cached prompt cells was not byte-identical to a fresh "
                                  "evaluation")
            self.kv_cache, self.prefix_cache, self.llm.prefix_cache = "off", None, None
        self._checked: set[str] = set()

    def sliding_window(self) -> int:
        """The model's sliding attention window in tokens (0: none)."""
        import llama_cpp

        return int(llama_cpp.llama_model_n_swa(self.llm.model))

    def chat_template(self) -> str | None:
        return self.llm.metadata.get("tokenizer.chat_template")

    def render_prompt(self, messages: Messages) -> str:
        """The prompt text the GGUF's chat template makes of `messages` (what generate() sends)."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = self.chat_template()
        if template is None:
            raise BackendError(f"{self.model_path.name} has no chat template")
        formatter = Jinja2ChatFormatter(template=template, eos_token="", bos_token="")
        return formatter(messages=messages).prompt

    def count_tokens(self, text: str) -> int:
        return len(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def context_left(self, messages: Messages) -> int:
        return self.n_ctx - self.count_tokens(to_chatml(messages))

    def check_grammar(self, grammar: str) -> None:
        """Raise GrammarError unless llama.cpp's own parser accepts the GBNF."""
        if grammar in self._checked:
            return
        import llama_cpp

        sampler = llama_cpp.llama_sampler_init_grammar(self.llm._model.vocab,
                                                       grammar.encode("utf-8"), b"root")
        if not sampler:
            raise GrammarError("llama.cpp rejected the grammar (its parser printed the reason)")
        llama_cpp.llama_sampler_free(sampler)
        self._checked.add(grammar)

    def generate(self, messages: Messages, *, schema: dict[str, Any] | None = None,
                 grammar: str | None = None, max_tokens: int, temperature: float = 0.0,
                 seed: int = 0) -> Generation:
        from llama_cpp import LlamaGrammar

        kwargs: dict[str, Any] = {}
        if grammar is not None:
            self.check_grammar(grammar)
            kwargs["grammar"] = LlamaGrammar.from_string(grammar, verbose=False)
        if self.kv_cache == "off":
            self.llm.reset()  # forget the previous prompt: the whole prompt is evaluated
        started = time.perf_counter()
        try:
            reply = self.llm.create_chat_completion(
                messages=messages, max_tokens=max_tokens, temperature=temperature, seed=seed,
                repeat_penalty=1.0, **kwargs)
        except ValueError as exc:  # e.g. prompt longer than the context window
            raise BackendError(f"llama.cpp: {exc}") from None
        seconds = time.perf_counter() - started
        choice = reply["choices"][0]
        usage = reply.get("usage") or {}
        return Generation(text=choice["message"]["content"] or "",
                          finish_reason=choice.get("finish_reason"),
                          prompt_tokens=usage.get("prompt_tokens"),
                          completion_tokens=usage.get("completion_tokens"),
                          seconds=seconds, backend=self.name,
                          token_logprobs=self._token_logprobs(usage.get("completion_tokens")))

    def _token_logprobs(self, completion_tokens: int | None) -> list[list[Any]] | None:
        """The last generation's answer tokens as [piece, log-probability] (the sampler also
        samples the end-of-text token, which is not part of the answer). A character whose
        UTF-8 bytes span tokens is the piece of the token that completes it (the others are ""),
        so the pieces always spell the text."""
        sampler = self.llm.last_sampler
        if not (self.llm.record_logprobs and sampler is not None and completion_tokens):
            return None
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        return [[decoder.decode(self.llm.detokenize([token])), round(lp, 4)]
                for token, lp in sampler.sampled[:completion_tokens]]


# --- Ollama ---------------------------------------------------------------------------------------

class OllamaBackend:
    """An Ollama server through the `ollama` client, raw ChatML prompt, schema as `format`."""

    name = "ollama"

    def __init__(self, model: str, *, host: str | None = None, num_ctx: int = 4096,
                 timeout: float = 300.0, logprobs: bool = False):
        try:
            import ollama
        except ImportError as exc:  # pragma: no cover
            raise BackendError("the ollama client is not installed: pip install "
                               "'memworker[serve]'") from exc
        self.model, self.host, self.num_ctx = model, host, num_ctx
        #: ask for each answer token's log-probability (`Generation.token_logprobs`)
        self.logprobs = logprobs
        self.client = ollama.Client(host=host, timeout=timeout)

    def generate(self, messages: Messages, *, schema: dict[str, Any] | None = None,
                 grammar: str | None = None, max_tokens: int, temperature: float = 0.0,
                 seed: int = 0) -> Generation:
        import httpx
        import ollama

        options = {"temperature": temperature, "seed": seed, "num_ctx": self.num_ctx,
                   "num_predict": max_tokens}
        started = time.perf_counter()
        try:
            reply = self.client.generate(model=self.model, prompt=to_chatml(messages), raw=True,
                                         format=schema, think=False, stream=False, options=options,
                                         **({"logprobs": True} if self.logprobs else {}))
        except ollama.ResponseError as exc:
            hint = (f" — create it with `ollama create {self.model} -f Modelfile`"
                    if exc.status_code == 404 else "")
            raise BackendError(f"ollama ({self.host or 'default host'}): {exc.error}{hint}") \
                from None
        except (httpx.HTTPError, ConnectionError) as exc:
            raise BackendError(f"cannot reach Ollama at {self.host or 'http://127.0.0.1:11434'} "
                               f"({exc}); is `ollama serve` running?") from None
        seconds = time.perf_counter() - started
        if not reply.done:
            raise BackendError("ollama returned an unfinished response")
        tokens = None
        if self.logprobs and reply.logprobs:
            tokens = [[lp.token, round(float(lp.logprob), 4)] for lp in reply.logprobs]
        return Generation(text=reply.response or "", finish_reason=reply.done_reason,
                          prompt_tokens=reply.prompt_eval_count, completion_tokens=reply.eval_count,
                          seconds=seconds, backend=self.name, token_logprobs=tokens)


# --- OpenAI-compatible HTTP -----------------------------------------------------------------------

def _request_json(req: urllib.request.Request, timeout: float) -> Any:
    url = req.full_url
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:300]
        raise BackendError(f"{url}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise BackendError(f"cannot reach {url}: {exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BackendError(f"{url}: the reply is not JSON") from None


def _headers(api_key: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def post_chat_completion(base_url: str, body: dict[str, Any], *, api_key: str | None = None,
                         timeout: float = 300.0) -> dict[str, Any]:
    """`POST {base_url}/chat/completions` (base_url ends in /v1) -> the reply's JSON object;
    BackendError naming the URL and what failed (HTTP status, unreachable, not JSON)."""
    url = f"{base_url.rstrip('/')}/chat/completions"
    req = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"),
                                 headers=_headers(api_key), method="POST")
    payload = _request_json(req, timeout)
    if not isinstance(payload, dict):
        raise BackendError(f"{url}: unexpected reply {str(payload)[:200]}")
    return payload


def served_models(base_url: str, *, api_key: str | None = None,
                  timeout: float = 30.0) -> list[str]:
    """`GET {base_url}/models` -> the ids of the models the server says it serves."""
    url = f"{base_url.rstrip('/')}/models"
    payload = _request_json(urllib.request.Request(url, headers=_headers(api_key)), timeout)
    try:
        return [str(m["id"]) for m in payload["data"]]
    except (KeyError, TypeError):
        raise BackendError(f"{url}: unexpected reply {str(payload)[:200]}") from None


class OpenAICompatBackend:
    """Any OpenAI-compatible chat-completions endpoint (llama_cpp.server, llama-server, vLLM)."""

    name = "openai-compatible"

    def __init__(self, base_url: str, *, model: str = "mem-worker", api_key: str | None = None,
                 timeout: float = 300.0, logprobs: bool = False):
        self.base_url = base_url.rstrip("/")
        self.model, self.api_key, self.timeout = model, api_key, timeout
        #: ask for each answer token's log-probability (`Generation.token_logprobs`;
        #: llama_cpp.server answers it only when started with --logits_all true)
        self.logprobs = logprobs

    def request_body(self, messages: Messages, *, schema: dict[str, Any] | None,
                     grammar: str | None, max_tokens: int, temperature: float,
                     seed: int) -> dict[str, Any]:
        # repeat_penalty 1: no penalty, as llama.cpp in process and the Modelfile decode;
        # llama_cpp.server's default is 1.1, which changed a greedy answer (tests/test_claim_gate.py)
        body: dict[str, Any] = {"model": self.model, "messages": messages,
                                "max_tokens": max_tokens, "temperature": temperature,
                                "seed": seed, "stream": False, "repeat_penalty": 1.0}
        if grammar is not None:
            body["grammar"] = grammar
        elif schema is not None:
            body["response_format"] = {"type": "json_object", "schema": schema}
        if self.logprobs:  # llama_cpp.server returns none without top_logprobs (0: none listed)
            body["logprobs"], body["top_logprobs"] = True, 0
        return body

    @staticmethod
    def token_logprobs(choice: dict[str, Any]) -> list[list[Any]] | None:
        """[[piece, log-probability], ...] of a chat choice's `logprobs.content`; where every
        entry carries its `bytes`, the pieces are decoded from them (a character whose UTF-8
        bytes span tokens is the piece of the token that completes it), else they are the
        entries' `token` texts."""
        content = (choice.get("logprobs") or {}).get("content")
        if not content:
            return None
        if all(isinstance(e.get("bytes"), list) for e in content):
            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            return [[decoder.decode(bytes(e["bytes"])), round(float(e["logprob"]), 4)]
                    for e in content]
        return [[e["token"], round(float(e["logprob"]), 4)] for e in content]

    def generate(self, messages: Messages, *, schema: dict[str, Any] | None = None,
                 grammar: str | None = None, max_tokens: int, temperature: float = 0.0,
                 seed: int = 0) -> Generation:
        body = self.request_body(messages, schema=schema, grammar=grammar, max_tokens=max_tokens,
                                 temperature=temperature, seed=seed)
        started = time.perf_counter()
        payload = post_chat_completion(self.base_url, body, api_key=self.api_key,
                                       timeout=self.timeout)
        seconds = time.perf_counter() - started
        url = f"{self.base_url}/chat/completions"
        try:
            choice = payload["choices"][0]
            text = choice["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise BackendError(f"{url}: unexpected reply {str(payload)[:200]}") from None
        usage = payload.get("usage") or {}
        try:
            tokens = self.token_logprobs(choice) if self.logprobs else None
        except (KeyError, TypeError, ValueError, AttributeError):
            raise BackendError(f"{url}: unexpected logprobs {str(choice.get('logprobs'))[:200]}") \
                from None
        return Generation(text=text, finish_reason=choice.get("finish_reason"),
                          prompt_tokens=usage.get("prompt_tokens"),
                          completion_tokens=usage.get("completion_tokens"),
                          seconds=seconds, backend=self.name, token_logprobs=tokens)


# --- replay ---------------------------------------------------------------------------------------

class ReplayBackend:
    """Returns the given outputs in order, recording every call (re-decoding recorded outputs;
    a test double that exercises the codec, not a model)."""

    name = "replay"

    def __init__(self, outputs: Iterable[str | tuple[str, str]]):
        self.outputs = [o if isinstance(o, tuple) else (o, "stop") for o in outputs]
        self.calls: list[dict[str, Any]] = []

    def generate(self, messages: Messages, *, schema: dict[str, Any] | None = None,
                 grammar: str | None = None, max_tokens: int, temperature: float = 0.0,
                 seed: int = 0) -> Generation:
        self.calls.append({"messages": messages, "schema": schema, "grammar": grammar,
                           "max_tokens": max_tokens, "temperature": temperature, "seed": seed})
        if len(self.calls) > len(self.outputs):
            raise BackendError(f"replay backend has only {len(self.outputs)} output(s)")
        text, finish = self.outputs[len(self.calls) - 1]
        return Generation(text=text, finish_reason=finish, backend=self.name)
