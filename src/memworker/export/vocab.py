"""The base's own vocabulary in an exported GGUF (capacity.md, "A grammar dead end with Gemma's
vocabulary").

The export converts a merged HF folder with llama.cpp's converter. A base that ships as a GGUF
with a SentencePiece vocabulary (`tokenizer.ggml.model = "llama"`, e.g. Gemma 3 from its chunk
packages) reaches the converter without a `tokenizer.model`, so the converter writes its
vocabulary as `gpt2` BPE. The token ids agree, but llama.cpp then spells the SentencePiece
byte-fallback tokens (`<0xF0>` …) as their names, not as bytes: no answer can write a character
outside the vocabulary (an emoji in a quote), and a grammar that requires one has no
continuation. `restore_base_vocab` rewrites the exported GGUF with the base GGUF's own
`tokenizer.ggml.*` fields (model, pre-tokenizer, tokens, scores, token types, special ids and
flags), keeping every other field (the chat template included) and every tensor byte. A base
whose GGUF vocabulary is the converter's own (SmolLM2: `gpt2`) is left untouched, byte for byte.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import gguf
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

PREFIX = "tokenizer.ggml."
MODEL = PREFIX + "model"


def _tokenizer_fields(reader: gguf.GGUFReader) -> dict[str, MetadataDetails]:
    out = {}
    for name, field in reader.fields.items():
        if name.startswith(PREFIX):
            kind = field.types[0]
            sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
            out[name] = MetadataDetails(kind, field.contents(), sub_type=sub)
    return out


def vocab_model(path: Path) -> str | None:
    """`tokenizer.ggml.model` of a GGUF (None when it has none)."""
    field = gguf.GGUFReader(path).fields.get(MODEL)
    return field.contents() if field is not None else None


def restore_base_vocab(source: Path, target: Path) -> dict[str, Any] | None:
    """Give the exported GGUF `target` the vocabulary of the base GGUF `source` when the
    converter wrote another kind (`llama` in the source, anything else in the target). Returns
    what was done (None: nothing to do, `target` untouched)."""
    src = _tokenizer_fields(gguf.GGUFReader(source))
    src_model = src.get(MODEL)
    if src_model is None or src_model.value != "llama":
        return None
    reader = gguf.GGUFReader(target)
    dst = _tokenizer_fields(reader)
    if dst.get(MODEL) is not None and dst[MODEL].value == "llama":
        return None
    src_tokens, dst_tokens = src.get(PREFIX + "tokens"), dst.get(PREFIX + "tokens")
    if src_tokens is None or dst_tokens is None or len(src_tokens.value) != len(dst_tokens.value):
        raise ValueError(f"{target}: its vocabulary ({len(dst_tokens.value) if dst_tokens else 0} "
                         f"tokens) is not the base GGUF's ({len(src_tokens.value) if src_tokens else 0}); "
                         "refusing to give it the base's")
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    removed = sorted(set(dst) - set(src))
    tmp = target.with_name(target.name + ".vocab.tmp")
    writer = gguf.GGUFWriter(tmp, arch=arch, endianess=reader.endianess)
    alignment = reader.fields.get(gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = int(alignment.contents())
    logging.getLogger("gguf-new-metadata").setLevel(logging.WARNING)
    copy_with_new_metadata(reader, writer, dict(src), removed)
    del reader
    os.replace(tmp, target)
    return {"from": "the base GGUF", "model": "llama", "was": dst[MODEL].value if MODEL in dst
            else None, "removed": removed}
