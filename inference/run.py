"""Run one memory-worker request and print the verified canonical answer (one JSON line).

Usage:
    # Ollama (a model created from the release Modelfile), raw ChatML prompt + JSON schema:
    python inference/run.py --model mem-extractor --prompt-file request.json [--host URL]

    # llama.cpp in process, any GGUF ("embedded" = the embedded SmolLM2-135M base):
    python inference/run.py --gguf release/mem-worker.Q8_0.gguf --prompt-file request.json
    python inference/run.py --gguf embedded --prompt-file rendered.txt

    # any OpenAI-compatible server (llama_cpp.server, llama-server, vLLM):
    python inference/run.py --openai-url http://127.0.0.1:8000/v1 --prompt-file request.json

The prompt file is either a JSON request {"task": "extract", "inputs": {...}} (the task's input
contract) or a rendered prompt from memworker.prompts (user message text, ChatML text, or a JSON
list of chat messages); the task comes from its "TASK:" line and the inputs are parsed back and
verified by re-rendering. Options: --task, --temperature (0), --seed (0), --n-ctx (4096),
--threads, --max-tokens, --no-grammar, --quiet. Codec notes go to stderr as "note:" lines; a
failure prints one "error:" line and exits 1 (2 for unusable arguments or inputs).
"""

import sys

from memworker.inference.cli import main

if __name__ == "__main__":
    sys.exit(main())
