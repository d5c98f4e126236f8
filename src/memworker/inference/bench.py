"""Latency and throughput of the llama.cpp backend with and without the grammar.

For each task the sample requests (`memworker.inference.samples`) are run n times per mode
(grammar / no grammar) at temperature 0, with the same messages and max_tokens. Every request is
warmed up once first. Per call: end-to-end latency, and generation speed = generated tokens /
(wall seconds - llama.cpp's prompt-evaluation time), so sampling (where the grammar costs) is
included and prompt processing is not. Printed: p50/p95 latency, tokens/s, how many outputs the
codec accepted, and the overhead ratio tokens/s(no grammar) / tokens/s(grammar).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path

from memworker.contracts import TASKS
from memworker.inference import codec
from memworker.inference.samples import SAMPLES


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)
    tokens: int = 0
    gen_seconds: float = 0.0
    accepted: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.gen_seconds if self.gen_seconds > 0 else float("nan")


def percentile(values: list[float], p: float) -> float:
    """Linear-interpolated percentile (p in 0..100) of a non-empty list."""
    xs = sorted(values)
    pos = (len(xs) - 1) * p / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _timed(backend, request: codec.Request, grammar: str | None) -> tuple[float, float, object]:
    import llama_cpp

    ctx = backend.llm._ctx.ctx
    llama_cpp.llama_perf_context_reset(ctx)
    started = time.perf_counter()
    gen = backend.generate(request.messages, schema=request.schema, grammar=grammar,
                           max_tokens=request.max_tokens, temperature=0.0, seed=0)
    wall = time.perf_counter() - started
    prompt_s = llama_cpp.llama_perf_context(ctx).t_p_eval_ms / 1000
    return wall, max(wall - prompt_s, 1e-9), gen


def bench(backend, n: int, budget: int | None, tasks: tuple[str, ...] = TASKS,
          log=print) -> dict[tuple[str, str], Stats]:
    results: dict[tuple[str, str], Stats] = {}
    for task in tasks:
        requests = [codec.prepare(task, inputs, backend=backend, budget_tokens=budget)
                    for inputs in SAMPLES[task]]
        # n calls per mode, grouped by request so each request's prompt stays cached
        plan = [requests[i % len(requests)] for i in range(n)]
        plan.sort(key=requests.index)
        for mode in ("grammar", "none"):
            stats = results.setdefault((task, mode), Stats())
            previous = None
            for request in plan:
                grammar = request.grammar if mode == "grammar" else None
                if request is not previous:
                    _timed(backend, request, grammar)  # warm-up: prompt into the KV cache
                    previous = request
                wall, gen_s, gen = _timed(backend, request, grammar)
                stats.latencies.append(wall)
                stats.tokens += gen.completion_tokens or 0
                stats.gen_seconds += gen_s
                try:
                    codec.decode(task, request.inputs, gen.text, finish_reason=gen.finish_reason,
                                 schema=request.schema)
                    stats.accepted += 1
                except codec.CodecError:
                    pass
            log(f"  {task:<11} {mode:<7} done ({len(stats.latencies)} calls)")
    return results


def report(results: dict[tuple[str, str], Stats]) -> str:
    lines = [f"{'task':<11} {'grammar':<7} {'n':>3} {'p50 s':>7} {'p95 s':>7} {'tok/s':>7} "
             f"{'tokens':>7} {'valid':>6}"]
    for (task, mode), s in results.items():
        lines.append(f"{task:<11} {mode:<7} {len(s.latencies):>3} "
                     f"{percentile(s.latencies, 50):>7.2f} {percentile(s.latencies, 95):>7.2f} "
                     f"{s.tokens_per_s:>7.1f} {s.tokens:>7} {s.accepted:>3}/{len(s.latencies):<2}")
    tasks = list(dict.fromkeys(t for t, _ in results))
    for task in tasks:
        g, none = results[(task, "grammar")], results[(task, "none")]
        lines.append(f"grammar overhead {task}: {none.tokens_per_s / g.tokens_per_s:.2f}x "
                     "(tok/s without / with grammar)")
    tot = {mode: (sum(results[(t, mode)].tokens for t in tasks),
                  sum(results[(t, mode)].gen_seconds for t in tasks)) for mode in ("grammar", "none")}
    overall = (tot["none"][0] / tot["none"][1]) / (tot["grammar"][0] / tot["grammar"][1])
    lines.append(f"grammar overhead overall: {overall:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from memworker.inference.backends import LlamaCppBackend
    from memworker.registry import embedded_gguf_path

    p = argparse.ArgumentParser(prog="python inference/bench.py", description=__doc__)
    p.add_argument("--gguf", help="GGUF to benchmark (default: the embedded base)")
    p.add_argument("-n", type=int, default=5, help="generations per task and mode (5)")
    p.add_argument("--threads", type=int, default=2, help="llama.cpp threads (2)")
    p.add_argument("--n-ctx", type=int, default=2048, help="context window (2048)")
    p.add_argument("--budget", type=int, default=240,
                   help="output token budget for the dynamic schema (240)")
    args = p.parse_args(argv)
    if args.n < 1:
        p.error("-n must be at least 1")
    path = Path(args.gguf) if args.gguf else embedded_gguf_path()
    backend = LlamaCppBackend(path, n_ctx=args.n_ctx, n_threads=args.threads)
    print(f"model {path.name}, n={args.n} per task and mode, threads={args.threads}, "
          f"n_ctx={args.n_ctx}, budget={args.budget} tokens")
    results = bench(backend, args.n, args.budget)
    print(report(results))
    return 0
