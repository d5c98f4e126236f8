"""Benchmark the llama.cpp backend on a GGUF (default: the embedded base): latency before/after the
prefix KV cache on mixed task order, grammar overhead, and the decode-rate ratio.

Usage:
    python inference/bench.py [--gguf PATH] [-n 6] [--threads 2] [--n-ctx 2048] [--budget 240]
                              [--modes before,prefix,after,no grammar]
    python inference/bench.py --gguf PATH --worker val:20 --extract-form turns --claim-gate -0.055
                              --propose --n-ctx 4096 --threads 1 [--kv-cache last] [--answers F]
    python inference/bench.py --gguf PATH --batch-costs [1500] [--lookup EVALDIR:ARM] --threads 1

The sample requests (memworker.inference.samples) go in mixed task order (extract, consolidate,
reflect, extract, …), temperature 0, through four backends in turn: "before" (llama-cpp-python's
reuse of the previous prompt only, its own sampler), "prefix" (kv_cache="prefix"), "after"
(prefix + argmax-first grammar sampling) and "no grammar". Printed per task: p50/p95 latency,
prompt tokens evaluated per call, p50 of wall / (answer tokens / raw decode rate), outputs
identical to "before", codec-accepted outputs; then the speed-up, the grammar overhead
(generation tok/s without / with), the grammar parse time and the prefix cache's figures.
`--worker`: the store's worker per window instead (seconds, answer tokens, decode ratio, where
llama.cpp's time went); `--batch-costs`: what evaluating k tokens at once costs, and with
`--lookup` what prompt-lookup speculation would save on recorded turns
(docs/research/inference-speed.md "Where the worker's time goes").
"""

import sys

from memworker.eval.bench import main

if __name__ == "__main__":
    sys.exit(main())
