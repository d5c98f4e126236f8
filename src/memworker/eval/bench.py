"""Speed of the llama.cpp backend: prefix KV reuse before/after, grammar overhead, decode ratio.

Requests are the fixed samples (`memworker.inference.samples`) in mixed task order (e, c, r, e,
c, r, …; each task's samples in turn), n per task, temperature 0, as an evaluation sends them.
Four backends on the same GGUF, each with its own context, take every request in turn (so the
machine's noise hits them alike):

- before: `kv_cache="last"` (llama-cpp-python reuses the common prefix with the previous prompt
  only, which across tasks is the system prompt) and llama-cpp-python's sampler, with the grammar;
- prefix: `kv_cache="prefix"` (shared prefixes of recent requests restored), same sampler;
- after: prefix + `greedy_grammar` (argmax first, whole-vocabulary grammar filter only when the
  grammar rejects the argmax);
- no grammar: the "after" backend's twin without the grammar.

One untimed warm-up round (one request per task) per backend first. Printed per task and mode:
p50/p95 latency, mean prompt tokens llama.cpp evaluated per call (what was not reused), mean
answer tokens, the p50 decode ratio = wall time / (answer tokens / raw decode rate), "p50@85" =
p50 latency rescaled to a machine decoding 85 tok/s, outputs identical to "before", and how many
outputs the codec accepted. The raw decode rate is a `Llama.eval` loop of single tokens (no
sampling, no Python completion loop: the machine's ceiling), measured in the same run before and
after the requests (mean used); FACTS.md: judge latency by that ratio where the machine is slower
than the ≈ 85 tok/s that the issue's absolute targets assume. Grammar overhead = generation tok/s
without / with the grammar (llama-cpp-python's sampler: "prefix"; argmax first: "after"),
generation = wall − prompt evaluation. Grammar parse = llama.cpp parsing one request's GBNF
(`llama_sampler_init_grammar`, done once per call): what reusing a parsed grammar could save.
State copy = llama-cpp-python's `save_state`/`load_state` vs the KV-only sequence state that the
prefix cache copies, for the longest stored prefix.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memworker import turns as turns_form
from memworker.contracts import TASKS
from memworker.corpus.sets import load_eval_rows
from memworker.inference import codec
from memworker.inference.backends import LlamaCppBackend
from memworker.inference.hmem import MemWorkerBackend
from memworker.inference.samples import SAMPLES
from memworker.prompts import EVENT_STAMPS, to_chatml
from memworker.registry import embedded_gguf_path
from memworker.samples import read_samples
from memworker.wire import LAYOUTS

REFERENCE_DECODE = 85.0  # tok/s the absolute latency targets assume (FACTS.md)
# mode -> (kv_cache, greedy_grammar, use the grammar)
MODES = {"before": ("last", False, True), "prefix": ("prefix", False, True),
         "after": ("prefix", True, True), "no grammar": ("prefix", True, False)}


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)
    prompt_evaluated: list[int] = field(default_factory=list)
    answer_tokens: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    tokens: int = 0
    gen_seconds: float = 0.0
    accepted: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.gen_seconds if self.gen_seconds > 0 else float("nan")

    def ratios(self, decode_rate: float) -> list[float]:
        return [wall / (n / decode_rate) for wall, n in zip(self.latencies, self.answer_tokens, strict=True)
                if n > 0]


def percentile(values: list[float], p: int) -> float:
    """Linear-interpolated percentile (p an integer in 1..99) of a non-empty list
    (`statistics.quantiles`, inclusive method, i.e. numpy's default)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def mixed_plan(n: int, tasks: tuple[str, ...] = TASKS, start: int = 0) -> list[tuple[str, int]]:
    """(task, sample index) pairs: tasks alternate on every call, each task's samples in turn."""
    return [(task, (start + k) % len(SAMPLES[task])) for k in range(n) for task in tasks]


def raw_decode_rate(llm, n: int = 64, prompt: list[int] | None = None) -> float:
    """Tokens/s of `Llama.eval` one token at a time after a prompt (default a short one; no
    sampling)."""
    if prompt is None:
        prompt = llm.tokenize(b"The memory worker reads events and writes facts.", add_bos=False)
    llm.reset()
    llm.eval(prompt)
    token = prompt[-1]
    started = time.perf_counter()
    for _ in range(n):
        llm.eval([token])
    rate = n / (time.perf_counter() - started)
    llm.reset()
    return rate


def grammar_parse_ms(llm, grammars: list[str]) -> float:
    """Mean milliseconds llama.cpp takes to parse one of `grammars` into a sampler."""
    import llama_cpp

    started = time.perf_counter()
    for gbnf in grammars:
        sampler = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, gbnf.encode(), b"root")
        llama_cpp.llama_sampler_free(sampler)
    return (time.perf_counter() - started) * 1000 / len(grammars)


def state_copy_ms(llm, tokens: list[int]) -> dict[str, float]:
    """Copying the context after evaluating `tokens`: llama-cpp-python's `save_state` /
    `load_state` (llama state + the logits array it keeps) vs the KV-only sequence state that
    `PrefixCache` uses. Milliseconds and MiB."""
    import llama_cpp

    llm.reset()
    llm.eval(tokens)
    t0 = time.perf_counter()
    state = llm.save_state()
    t1 = time.perf_counter()
    llm.load_state(state)
    t2 = time.perf_counter()
    ctx = llm._ctx.ctx
    size = llama_cpp.llama_state_seq_get_size(ctx, 0)
    buf = (ctypes.c_uint8 * size)()
    t3 = time.perf_counter()
    llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0)
    t4 = time.perf_counter()
    llama_cpp.llama_state_seq_set_data(ctx, buf, size, 0)
    t5 = time.perf_counter()
    llm.reset()
    return {"save_state_ms": (t1 - t0) * 1000, "load_state_ms": (t2 - t1) * 1000,
            "save_state_mib": (state.llama_state_size + state.scores.nbytes) / 2**20,
            "seq_get_ms": (t4 - t3) * 1000, "seq_set_ms": (t5 - t4) * 1000,
            "seq_mib": size / 2**20}


def _call(backend, request: codec.Request, grammar: bool):
    import llama_cpp

    ctx = backend.llm._ctx.ctx
    llama_cpp.llama_perf_context_reset(ctx)
    started = time.perf_counter()
    gen = backend.generate(request.messages, schema=request.schema,
                           grammar=request.grammar if grammar else None,
                           max_tokens=request.max_tokens, temperature=0.0, seed=0)
    wall = time.perf_counter() - started
    perf = llama_cpp.llama_perf_context(ctx)
    return wall, perf.t_p_eval_ms / 1000, perf.n_p_eval, gen


def bench(backends: dict, requests: dict[str, list[codec.Request]], n: int,
          tasks: tuple[str, ...] = TASKS, log=print) -> dict[tuple[str, str], Stats]:
    """Every request of the mixed plan through every backend in turn (`backends`: mode name ->
    (backend, use grammar))."""
    for task, i in mixed_plan(1, tasks):  # warm-up: weights paged in, first prompts evaluated
        for backend, grammar in backends.values():
            _call(backend, requests[task][i], grammar)
    results: dict[tuple[str, str], Stats] = {}
    plan = mixed_plan(n, tasks, start=1)
    for k, (task, i) in enumerate(plan, 1):
        request = requests[task][i]
        for mode, (backend, grammar) in backends.items():
            wall, prompt_s, prompt_n, gen = _call(backend, request, grammar)
            stats = results.setdefault((task, mode), Stats())
            stats.latencies.append(wall)
            stats.prompt_evaluated.append(prompt_n)
            stats.answer_tokens.append(gen.completion_tokens or 0)
            stats.texts.append(gen.text)
            stats.tokens += gen.completion_tokens or 0
            stats.gen_seconds += max(wall - prompt_s, 1e-9)
            try:
                codec.decode(task, request.inputs, gen.text, finish_reason=gen.finish_reason,
                             schema=request.schema)
                stats.accepted += 1
            except codec.CodecError:
                pass
        if k % len(tasks) == 0:
            log(f"  {k}/{len(plan)} requests")
    return results


def report(results: dict[tuple[str, str], Stats], decode_rate: float) -> str:
    tasks = list(dict.fromkeys(t for t, _ in results))
    lines = [f"{'task':<11} {'mode':<10} {'n':>3} {'p50 s':>6} {'p95 s':>6} {'prompt ev':>9} "
             f"{'ans tok':>7} {'ratio':>5} {'p50@85':>6} {'same':>5} {'valid':>5}"]
    for task in tasks:
        ref = results[(task, "before")]
        for mode in MODES:
            s = results.get((task, mode))
            if s is None:
                continue
            same = (f"{sum(a == b for a, b in zip(s.texts, ref.texts, strict=True))}/{len(s.texts)}"
                    if MODES[mode][2] else "-")
            at85 = [w * decode_rate / REFERENCE_DECODE for w in s.latencies]
            ratios = s.ratios(decode_rate)
            lines.append(
                f"{task:<11} {mode:<10} {len(s.latencies):>3} {percentile(s.latencies, 50):>6.2f} "
                f"{percentile(s.latencies, 95):>6.2f} {statistics.mean(s.prompt_evaluated):>9.0f} "
                f"{statistics.mean(s.answer_tokens):>7.0f} "
                f"{percentile(ratios, 50) if ratios else float('nan'):>5.2f} "
                f"{percentile(at85, 50):>6.2f} {same:>5} {s.accepted:>2}/{len(s.latencies):<2}")
    for task in tasks:
        b, a = results[(task, "before")], results[(task, "after")]
        lines.append(f"speed-up {task}: p50 {percentile(b.latencies, 50) / percentile(a.latencies, 50):.2f}x "
                     f"(before / after)")
    modes = {mode for _, mode in results}
    for with_grammar in ("prefix", "after"):
        if not {with_grammar, "no grammar"} <= modes:
            continue
        label = "llama-cpp-python sampler" if with_grammar == "prefix" else "argmax first"
        for task in tasks:
            g, none = results[(task, with_grammar)], results[(task, "no grammar")]
            lines.append(f"grammar overhead ({label}) {task}: "
                         f"{none.tokens_per_s / g.tokens_per_s:.2f}x (generation tok/s "
                         f"{none.tokens_per_s:.1f} without / {g.tokens_per_s:.1f} with)")
        rate = {mode: sum(results[(t, mode)].tokens for t in tasks)
                / sum(results[(t, mode)].gen_seconds for t in tasks)
                for mode in (with_grammar, "no grammar")}
        lines.append(f"grammar overhead ({label}) overall: "
                     f"{rate['no grammar'] / rate[with_grammar]:.2f}x")
    return "\n".join(lines)


class DecodeTimer:
    """Times every `llama_decode` of one `Llama` (its context's `decode`, wrapped on the instance):
    single tokens (decoding an answer) apart from batches (evaluating a prompt)."""

    def __init__(self, llm):
        self.single: list[float] = []
        self.batches: list[tuple[int, float]] = []
        ctx, decode = llm._ctx, llm._ctx.decode

        def timed(batch):
            started = time.perf_counter()
            try:
                return decode(batch)
            finally:
                seconds, n = time.perf_counter() - started, batch.batch.n_tokens
                (self.single.append(seconds) if n == 1 else self.batches.append((n, seconds)))
        ctx.decode = timed

    def clear(self) -> None:
        self.single.clear()
        self.batches.clear()

    def report(self, wall: float) -> str:
        one, tokens = sum(self.single), sum(n for n, _ in self.batches)
        many = sum(t for _, t in self.batches)
        return (f"llama_decode: {len(self.single)} single tokens in {one:.1f} s "
                f"({1000 * one / max(1, len(self.single)):.1f} ms each), {len(self.batches)} "
                f"prompt batches of {tokens} tokens in {many:.1f} s "
                f"({tokens / many if many else float('nan'):.0f} tok/s); everything else "
                f"{wall - one - many:.1f} s")


def _window(worker, row: dict, timer: DecodeTimer | None) -> dict[str, Any]:
    """One extract row through `worker`, timed: wall seconds, the prompt tokens llama.cpp
    evaluated (with `timer`: every batch decoded during the window; what the KV reuse did not
    keep), the answer tokens of every generation (all turns and retries), calls, and the claims
    kept and gated away (together: those the codec accepted, the claims proposed)."""
    before = sum(n for n, _ in timer.batches) if timer is not None else 0
    started = time.perf_counter()
    result = worker._run("extract", row["input"])
    wall = time.perf_counter() - started
    generations = result.turns if result.turns is not None else result.attempts
    return {"wall": wall, "tokens": sum(g.completion_tokens or 0 for g in generations),
            "prompt": (sum(n for n, _ in timer.batches) - before) if timer is not None else None,
            "calls": sum(g.finish_reason != "skipped" for g in generations),
            "kept": len(result.output["claims"]),
            "gated": len((result.gate or {}).get("dropped", [])),
            "answers": [g.raw for g in generations]}


def workers_bench(workers: dict[str, tuple[Any, DecodeTimer | None]], rows: list[dict],
                  log=print) -> dict[str, list[dict[str, Any]]]:
    """Each extract row's input through each of the store's workers (`MemWorkerBackend`: its
    extraction form, turn history and claim gate; label -> (worker, its `DecodeTimer` or None)),
    the workers taking each row in turn, first one then the other, so that the machine's noise
    hits them alike; one untimed warm-up call each first (the timers cleared after it). Per
    worker, per row: `_window`'s figures."""
    for worker, timer in workers.values():
        worker._run("extract", rows[0]["input"])
        if timer is not None:
            timer.clear()
    out: dict[str, list[dict[str, Any]]] = {label: [] for label in workers}
    labels = list(workers)
    for k, row in enumerate(rows, 1):
        for label in (labels if k % 2 else labels[::-1]):
            worker, timer = workers[label]
            out[label].append(_window(worker, row, timer))
        if k % 5 == 0:
            log(f"  {k}/{len(rows)} windows")
    return out


def worker_bench(worker, rows: list[dict], log=print, timer: DecodeTimer | None = None
                 ) -> list[dict[str, Any]]:
    """`workers_bench` of one worker."""
    return workers_bench({"worker": (worker, timer)}, rows, log)["worker"]


def worker_report(calls: list[dict[str, Any]], decode_rate: float) -> str:
    walls = [c["wall"] for c in calls]
    ratios = [c["wall"] / (c["tokens"] / decode_rate) for c in calls if c["tokens"]]
    prompts = [c["prompt"] for c in calls if c.get("prompt") is not None]
    median = statistics.median
    read = (f"prompt tokens evaluated per window median {median(prompts):.0f} (p90 "
            f"{percentile(prompts, 90):.0f}); " if prompts else "")
    return (f"worker extract, {len(calls)} windows: p50 {percentile(walls, 50):.2f} s, p95 "
            f"{percentile(walls, 95):.2f} s per window; {statistics.mean(c['calls'] for c in calls):.1f}"
            f" calls and {statistics.mean(c['tokens'] for c in calls):.0f} answer tokens per "
            f"window; decode ratio p50 {percentile(ratios, 50) if ratios else float('nan'):.2f} "
            f"(wall / (answer tokens / raw decode rate)); p50@85 "
            f"{percentile(walls, 50) * decode_rate / REFERENCE_DECODE:.2f} s; claims kept "
            f"{sum(c['kept'] for c in calls)}, gated away {sum(c['gated'] for c in calls)}\n"
            f"  per window, median: {read}answer tokens {median(c['tokens'] for c in calls):.0f} "
            f"(p90 {percentile([c['tokens'] for c in calls], 90):.0f}), calls "
            f"{median(c['calls'] for c in calls):.0f}, claims proposed "
            f"{median(c['kept'] + c['gated'] for c in calls):.0f}, kept "
            f"{median(c['kept'] for c in calls):.0f}")


def _worker_line(label: str, path: Path, worker, rows: int, set_name: str, args) -> str:
    gate = worker.claim_gate.spec if worker.claim_gate else "none"
    history = f", turn history {worker.turn_history}" if worker.extract_form in \
        turns_form.TURN_FORMS else ""
    if worker.event_stamps != "full":
        history += f", event timestamps {worker.event_stamps}"
    if worker.turn_quotes != "upto":
        history += ", each turn quoting its own event"
    if worker.claim_layout != "v3":
        history += f", claims in layout {worker.claim_layout}"
    if worker.with_rules != "none":
        history += ", the rules' claims kept beside the model's"
    if worker.turn_gate is not None:
        history += f", turns asked where the turn gate gives P(fact) >= {worker.turn_gate:g}"
        if worker.turn_gate_tail != "read":
            history += ", the window read up to the last asked turn's event"
        if worker.turn_gate_tail == "omit":
            history += ", the unasked turns left out of the conversation"
    return (f"{label}: model {path.name}, worker: extract form {worker.extract_form}{history}, "
            f"claim gate {gate}{', proposing' if worker.propose else ''}; {rows} {set_name} "
            f"extract windows of {args.corpus}, threads={worker.backend.llm.n_threads}, "
            f"n_ctx={args.n_ctx}, kv cache {worker.backend.kv_cache}")


def main_worker(args: argparse.Namespace, path: Path) -> int:
    """`--worker`: the store's worker on the first N extract rows of a corpus split; with
    `--baseline DIR`, a release's worker beside it on the same rows, in the same run."""
    set_name, _, n = args.worker.partition(":")
    rows = [r for r in load_eval_rows(args.corpus, set_name) if r["task"] == "extract"]
    rows = rows[:int(n)] if n else rows
    if not rows:
        raise SystemExit(f"bench: no extract rows in {args.corpus} {set_name}")
    worker = MemWorkerBackend.from_gguf(path, n_ctx=args.n_ctx, n_threads=args.threads,
                                        kv_cache=args.kv_cache, extract_form=args.extract_form,
                                        claim_gate=args.claim_gate, propose=args.propose,
                                        turn_history=args.turn_history,
                                        event_stamps=args.event_stamps,
                                        turn_quotes=args.turn_quotes,
                                        claim_layout=args.claim_layout,
                                        with_rules="union" if args.with_rules else "none",
                                        turn_gate=args.turn_gate,
                                        turn_gate_tail=args.turn_gate_tail)
    workers = {"worker": (worker, DecodeTimer(worker.backend.llm))}
    print(_worker_line("[worker]", path, worker, len(rows), set_name, args))
    if args.baseline:
        base = MemWorkerBackend.from_release(args.baseline, n_ctx=args.n_ctx,
                                             n_threads=args.threads, kv_cache=args.kv_cache)
        workers["baseline"] = (base, DecodeTimer(base.backend.llm))
        print(_worker_line("[baseline]", base.backend.model_path, base, len(rows), set_name,
                           args))
    llm = worker.backend.llm
    rate0 = raw_decode_rate(llm)
    started = time.perf_counter()
    calls = workers_bench(workers, rows)
    elapsed = time.perf_counter() - started
    if args.answers:
        with open(args.answers, "w", encoding="utf-8") as out:
            for k, row in enumerate(rows):
                out.write(json.dumps({"id": row["id"], "turns": calls["worker"][k]["answers"],
                                      **({"baseline": calls["baseline"][k]["answers"]}
                                         if "baseline" in calls else {})}) + "\n")
    rate = (rate0 + raw_decode_rate(llm)) / 2
    print(f"raw decode rate {rate:.1f} tok/s (Llama.eval, one token at a time; "
          f"{rate0:.1f} before the requests)")
    for label, (_, timer) in workers.items():
        timed = sum(c["wall"] for c in calls[label])
        print(f"[{label}] {worker_report(calls[label], rate)}")
        print(f"  {timer.report(timed)} (over the {len(calls[label])} timed windows, "
              f"{timed:.1f} s)")
    if "baseline" in calls:
        new, old = (percentile([c["wall"] for c in calls[k]], 50) for k in ("worker", "baseline"))
        print(f"worker / baseline p50: {new / old:.2f} ({new:.2f} s / {old:.2f} s, the same "
              f"{len(rows)} windows, each worker in turn)")
    print(f"bench: {len(rows)} windows in {elapsed:.0f} s")
    return 0


#: --batch-costs: the batch sizes timed (one token = decoding an answer token)
BATCH_SIZES = (1, 2, 4, 8, 16, 64)


def batch_costs(llm, context: int = 1500, sizes: tuple[int, ...] = BATCH_SIZES,
                repeats: int = 4) -> dict[int, float]:
    """Milliseconds of one `Llama.eval` of k tokens (best of `repeats`) after a `context`-token
    prompt, for each k in `sizes`: what checking a draft of k - 1 tokens in one batch costs,
    beside k = 1 (one answer token). The context is cut back to `context` before each call."""
    text = b"The memory worker reads events and writes facts. "
    want = context + max(sizes)
    tokens = llm.tokenize(text * (want // 8 + 1), add_bos=False)[:want]
    llm.reset()
    llm.eval(tokens[:context])
    out: dict[int, float] = {}
    for k in sizes:
        best = float("inf")
        for _ in range(repeats):
            llm.n_tokens = context
            llm._ctx.kv_cache_seq_rm(-1, context, -1)
            started = time.perf_counter()
            llm.eval(tokens[context:context + k])
            best = min(best, time.perf_counter() - started)
        out[k] = best * 1000
    llm.reset()
    return out


def cost_of(costs: dict[int, float], k: int) -> float:
    """Milliseconds of a k-token batch from `batch_costs`' figures: linear between the measured
    sizes, linear beyond the largest two."""
    sizes = sorted(costs)
    if k in costs:
        return costs[k]
    lo = max((s for s in sizes if s < k), default=sizes[0])
    hi = min((s for s in sizes if s > k), default=None)
    if hi is None:
        lo, hi = sizes[-2], sizes[-1]
    return costs[lo] + (costs[hi] - costs[lo]) * (k - lo) / (hi - lo)


def lookup_steps(prompt: list[int], answer: list[int], draft: int, ngram: int = 2
                 ) -> list[tuple[int, int]]:
    """Prompt-lookup drafting replayed on a known greedy answer: at each step the last `ngram`
    tokens are looked up in what precedes them (prompt and answer so far, latest occurrence);
    the up to `draft` tokens after that occurrence are the draft, checked in one batch with the
    step's input token. A step yields the draft's prefix that the answer continues with, plus the
    model's own next token (one token and a batch of 1 when nothing is found). Returns per step
    (tokens in its batch, answer tokens it yields)."""
    seen = list(prompt)
    steps: list[tuple[int, int]] = []
    i = 0
    while i < len(answer):
        key, guess = seen[-ngram:], []
        for j in range(len(seen) - ngram - 1, -1, -1):
            if seen[j:j + ngram] == key:
                guess = seen[j + ngram:j + ngram + draft]
                break
        hit = 0
        while hit < len(guess) and i + hit < len(answer) and guess[hit] == answer[i + hit]:
            hit += 1
        yielded = min(hit + 1, len(answer) - i)
        steps.append((1 + len(guess), yielded))
        seen += answer[i:i + yielded]
        i += yielded
    return steps


def lookup_report(llm, folder: Path, arm: str, corpus: str, costs: dict[int, float],
                  drafts: tuple[int, ...] = (4, 8, 16), windows: int = 40) -> str:
    """What prompt-lookup speculation would do on an evaluation folder's turns-form extract
    samples of `arm` (the first `windows` windows): each turn's prompt rebuilt from the corpus row
    and the turns before it, its recorded answer tokenized again, `lookup_steps` per draft length,
    and the decode time that costs at `costs` (`batch_costs`) beside one token at a time."""
    config = json.loads((folder / "config.json").read_text())
    rows = {r["id"]: r for r in load_eval_rows(corpus, config["set"])}
    form = config.get("sampler", {}).get("extract_form", "turns")
    turns = []
    for sample in read_samples(folder / "samples.jsonl"):
        if sample.get("arm") != arm or sample.get("task") != "extract" or not sample.get("turns"):
            continue
        if len({t for t, _ in turns}) >= windows:
            break
        answers: list[str] = []
        for turn in sample["turns"]:
            if turn.get("error") is not None:
                break
            text = to_chatml(turns_form.messages(rows[sample["id"]]["input"], answers, form))
            turns.append((sample["id"], (llm.tokenize(text.encode(), add_bos=False, special=True),
                                         llm.tokenize(turn["raw"].encode(), add_bos=False))))
            answers.append(turn["raw"])
    if not turns:
        raise SystemExit(f"bench: no turns-form extract samples of arm {arm!r} in {folder}")
    tokens = sum(len(a) for _, (_, a) in turns)
    plain = tokens * costs[1] / 1000
    lines = [f"prompt lookup on {len({w for w, _ in turns})} windows, {len(turns)} turns, "
             f"{tokens} answer tokens of {arm} in {folder}: one token at a time "
             f"{plain:.1f} s of decoding at {costs[1]:.1f} ms a token"]
    for draft in drafts:
        steps = [s for _, (p, a) in turns for s in lookup_steps(p, a, draft)]
        spent = sum(cost_of(costs, b) for b, _ in steps) / 1000
        lines.append(f"  drafts of up to {draft}: {tokens / len(steps):.2f} answer tokens per "
                     f"step, {spent:.1f} s ({spent / plain - 1:+.1%})")
    return "\n".join(lines)


def context_rates(path: Path, threads: int, context: int = 900, n: int = 64) -> dict[str, float]:
    """Prompt tokens/s (best of 3 evaluations of a `context`-token prompt) and decode tokens/s
    (`Llama.eval` one token at a time after it, no sampling) of llama.cpp on `threads` threads."""
    llm = LlamaCppBackend(path, n_ctx=max(2048, context + n + 8), n_threads=threads).llm
    try:
        prompt = llm.tokenize(b"The memory worker reads events and writes facts. " * context,
                              add_bos=False)[:context]
        prompt_rate = 0.0
        for _ in range(3):
            llm.reset()
            started = time.perf_counter()
            llm.eval(prompt)
            prompt_rate = max(prompt_rate, context / (time.perf_counter() - started))
        return {"prompt": prompt_rate, "decode": raw_decode_rate(llm, n, prompt)}
    finally:
        llm.close()


#: --threads-sweep: the OpenMP wait policies compared ("PASSIVE" is what importing memworker sets)
POLICIES = ("PASSIVE", "ACTIVE")


def threads_sweep(path: Path, log=print) -> list[dict[str, Any]]:
    """`context_rates` for 1 and 2 threads under each wait policy, on an idle machine and beside
    one busy process (a Python loop holding a core): each in a fresh process, since the OpenMP
    runtime reads its wait policy once, when it loads."""
    rows = []
    for busy in (False, True):
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
        try:
            for policy in POLICIES:
                for threads in (1, 2):
                    env = {**os.environ, "OMP_WAIT_POLICY": policy}
                    code = ("import json, sys; from pathlib import Path; "
                            "from memworker.eval.bench import context_rates; "
                            "print(json.dumps(context_rates(Path(sys.argv[1]), int(sys.argv[2]))))")
                    out = subprocess.run([sys.executable, "-c", code, str(path), str(threads)],
                                         env=env, capture_output=True, text=True, check=True)
                    rates = json.loads(out.stdout.strip().splitlines()[-1])
                    rows.append({"machine": "one busy process" if busy else "idle",
                                 "policy": policy, "threads": threads, **rates})
                    log(f"  {rows[-1]['machine']}, {policy}, {threads} thread(s): decode "
                        f"{rates['decode']:.1f} tok/s, prompt {rates['prompt']:.0f} tok/s")
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
    return rows


def main_batch_costs(args: argparse.Namespace, path: Path) -> int:
    """`--batch-costs [CONTEXT]` (and `--lookup DIR:ARM`)."""
    llm = LlamaCppBackend(path, n_ctx=max(args.n_ctx, args.batch_costs + max(BATCH_SIZES) + 8),
                          n_threads=args.threads or None).llm
    print(f"model {path.name}: one llama.cpp evaluation of k tokens after a {args.batch_costs}-"
          f"token prompt, threads={llm.n_threads}, batch threads={llm.n_threads_batch}")
    costs = batch_costs(llm, args.batch_costs)
    print("  " + ", ".join(f"k={k}: {ms:.1f} ms ({ms / k:.1f} a token)" for k, ms in costs.items()))
    if args.lookup:
        folder, _, arm = args.lookup.rpartition(":")
        print(lookup_report(llm, Path(folder), arm, args.corpus, costs))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python inference/bench.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gguf", help="GGUF to benchmark (default: the embedded base)")
    p.add_argument("-n", type=int, default=6, help="timed requests per task and mode (6)")
    p.add_argument("--threads", type=int, default=2,
                   help="llama.cpp threads (2; 0: the backend's default, one for a small model)")
    p.add_argument("--n-ctx", type=int, default=2048, help="context window (2048)")
    p.add_argument("--budget", type=int, default=240,
                   help="output token budget for the dynamic schema (240)")
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"comma-separated subset of {', '.join(MODES)} (all; 'before' and "
                        "'after' are needed)")
    p.add_argument("--worker", metavar="SET[:N]",
                   help="instead of the modes: the store's worker (MemWorkerBackend, with "
                        "--extract-form and --claim-gate) on the first N extract rows of the "
                        "corpus split SET (e.g. val:20): seconds per window, answer tokens, the "
                        "decode ratio")
    p.add_argument("--corpus", default="data/corpus", help="corpus of --worker (data/corpus)")
    p.add_argument("--extract-form", default="window", help="--worker: the extraction form")
    p.add_argument("--claim-gate", default=None, metavar="SCORE>=T",
                   help="--worker: the student's claim gate")
    p.add_argument("--with-rules", action="store_true",
                   help="--worker: the hybrid worker, the rules' extract claims kept beside the "
                        "model's (a release's worker with with_rules)")
    p.add_argument("--turn-gate", type=float, default=None, metavar="T",
                   help="--worker, extract form turns: a turn whose event the committed turn gate "
                        "gives P(fact) below T is not asked (memworker.inference.turn_gate)")
    p.add_argument("--turn-gate-tail", default="read", choices=codec.TAILS,
                   help="--worker with --turn-gate: drop, the prompts end at the last asked "
                        "turn's event (the unasked events after it are not read); omit, that "
                        "and no unasked turn's question or empty answer in the prompts")
    p.add_argument("--propose", action="store_true",
                   help="--worker: every turn proposes a claim for the gate (a release's worker "
                        "with propose)")
    p.add_argument("--turn-history", default="answers", choices=turns_form.HISTORIES,
                   help="--worker, turns forms: what a turn's prompt holds before its question "
                        "(answers: every earlier turn and answer; none: the window read once)")
    p.add_argument("--turn-quotes", default="upto", choices=turns_form.TURN_QUOTES,
                   help="--worker, turns forms: own, each turn's claims quote its own event only")
    p.add_argument("--event-stamps", default="full", choices=EVENT_STAMPS,
                   help="--worker: how extract prompts write the events' timestamps (full; "
                        "minute: a student trained with train/run.py --event-stamps minute)")
    p.add_argument("--claim-layout", default="v3", choices=LAYOUTS,
                   help="--worker, turns forms: v6, claims written without quotes, the codec "
                        "quoting the turn's sentence (a student trained with train/run.py "
                        "--claim-layout v6)")
    p.add_argument("--baseline", metavar="RELEASE_DIR",
                   help="--worker: a release folder whose worker (its receipt's form, gate and "
                        "proposing) takes the same windows in the same run, each worker in turn: "
                        "both reported, and the ratio of their p50")
    p.add_argument("--kv-cache", default="prefix", choices=LlamaCppBackend.KV_CACHE_MODES,
                   help="--worker: the backend's KV reuse (prefix, the release's)")
    p.add_argument("--answers", metavar="FILE",
                   help="--worker: write each window's turn answers as one JSON line (compare two "
                        "runs' files to see whether a setting changes what the worker writes)")
    p.add_argument("--batch-costs", type=int, metavar="CONTEXT", nargs="?", const=1500,
                   help="instead of the modes: milliseconds of one llama.cpp evaluation of "
                        f"{', '.join(map(str, BATCH_SIZES))} tokens after a CONTEXT-token prompt "
                        "(1500), on --threads")
    p.add_argument("--lookup", metavar="DIR:ARM",
                   help="with --batch-costs: prompt-lookup speculation replayed on the turns-form "
                        "extract samples of ARM in evaluation folder DIR (tokens per step, "
                        "decode time at the measured costs)")
    p.add_argument("--threads-sweep", action="store_true",
                   help="instead of the modes: raw decode and prompt rates at a 900-token context "
                        "for 1 and 2 threads under the PASSIVE and ACTIVE OpenMP wait policies, "
                        "idle and beside one busy process (each in a fresh process)")
    args = p.parse_args(argv)
    if args.n < 1:
        p.error("-n must be at least 1")
    path = Path(args.gguf) if args.gguf else embedded_gguf_path()
    if not path.is_file():
        p.error(f"GGUF not found: {path}")
    if args.worker:
        return main_worker(args, path)
    if args.lookup and args.batch_costs is None:
        p.error("--lookup needs --batch-costs")
    if args.batch_costs is not None:
        return main_batch_costs(args, path)
    if args.threads_sweep:
        print(f"model {path.name}: llama.cpp decode (one token at a time after a 900-token "
              "prompt) and prompt rates")
        threads_sweep(path)
        return 0
    chosen = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not {"before", "after"} <= set(chosen) or not set(chosen) <= set(MODES):
        p.error(f"--modes must include before and after, from: {', '.join(MODES)}")
    backends = {mode: (LlamaCppBackend(path, n_ctx=args.n_ctx, n_threads=args.threads,
                                       kv_cache=kv, greedy_grammar=greedy), grammar)
                for mode, (kv, greedy, grammar) in MODES.items() if mode in chosen}
    first = next(iter(backends.values()))[0]
    requests = {task: [codec.prepare(task, inputs, backend=first, budget_tokens=args.budget)
                       for inputs in SAMPLES[task]] for task in TASKS}
    print(f"model {path.name}, n={args.n} per task and mode, mixed task order, "
          f"threads={first.llm.n_threads}, n_ctx={args.n_ctx}, budget={args.budget} tokens")
    rate0 = raw_decode_rate(first.llm)
    started = time.perf_counter()
    results = bench(backends, requests, args.n)
    elapsed = time.perf_counter() - started
    rate = (rate0 + raw_decode_rate(first.llm)) / 2
    parse = grammar_parse_ms(first.llm, [r.grammar for rs in requests.values() for r in rs])
    print(f"raw decode rate {rate:.1f} tok/s (Llama.eval, one token at a time; "
          f"{rate0:.1f} before the requests)")
    print(report(results, rate))
    print(f"grammar parse: {parse:.1f} ms per request grammar (llama_sampler_init_grammar)")
    after = backends["after"][0].prefix_cache
    if after.entries:
        key = max(after.entries, key=lambda e: len(e.key)).key.tolist()
        c = state_copy_ms(first.llm, key)
        print(f"state copy of the longest stored prefix ({len(key)} tokens): Llama.save_state "
              f"{c['save_state_ms']:.0f} ms / load_state {c['load_state_ms']:.0f} ms "
              f"({c['save_state_mib']:.1f} MiB with its logits array); KV-only sequence state "
              f"get {c['seq_get_ms']:.1f} ms / set {c['seq_set_ms']:.1f} ms "
              f"({c['seq_mib']:.1f} MiB)")
    print(f"prefix cache: {after.stats.stored} prefixes stored ({after.nbytes() / 2**20:.1f} MiB "
          f"held), {after.stats.hits} restores, {after.stats.restored_tokens} prompt tokens "
          f"not evaluated, {after.stats.restore_s * 1000:.0f} ms restoring, "
          f"{after.stats.store_s * 1000:.0f} ms saving")
    print(f"bench: {len(results)} task/mode cells in {elapsed:.0f} s")
    return 0
