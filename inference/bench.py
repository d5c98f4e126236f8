"""Benchmark the embedded base GGUF: latency p50/p95 and tokens/s per task, with and without the
grammar, and the grammar overhead ratio.

Usage:
    python inference/bench.py [--gguf PATH] [-n 5] [--threads 2] [--n-ctx 2048] [--budget 240]

Each task runs its fixed sample requests (memworker.inference.samples) round-robin, n generations
per task and mode, temperature 0, after one warm-up call per request (so the prompt is in the KV
cache and latency is mostly decoding). tokens/s = generated tokens / generation seconds.
"""

import sys

from memworker.inference.bench import main

if __name__ == "__main__":
    sys.exit(main())
