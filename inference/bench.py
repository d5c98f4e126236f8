"""Benchmark the llama.cpp backend on a GGUF (default: the embedded base): latency before/after the
prefix KV cache on mixed task order, grammar overhead, and the decode-rate ratio.

Usage:
    python inference/bench.py [--gguf PATH] [-n 6] [--threads 2] [--n-ctx 2048] [--budget 240]
                              [--modes before,prefix,after,no grammar]

The sample requests (memworker.inference.samples) go in mixed task order (extract, consolidate,
reflect, extract, …), temperature 0, through four backends in turn: "before" (llama-cpp-python's
reuse of the previous prompt only, its own sampler), "prefix" (kv_cache="prefix"), "after"
(prefix + argmax-first grammar sampling) and "no grammar". Printed per task: p50/p95 latency,
prompt tokens evaluated per call, p50 of wall / (answer tokens / raw decode rate), outputs
identical to "before", codec-accepted outputs; then the speed-up, the grammar overhead
(generation tok/s without / with), the grammar parse time and the prefix cache's figures.
"""

import sys

from memworker.inference.bench import main

if __name__ == "__main__":
    sys.exit(main())
