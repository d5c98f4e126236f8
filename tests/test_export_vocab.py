"""The export keeps a SentencePiece base's own vocabulary (memworker.export.vocab): a GGUF the
converter wrote with a `gpt2` vocabulary gets the base GGUF's `tokenizer.ggml.*` fields, every
other field and tensor byte kept; a base whose vocabulary is already the converter's is left
untouched. Tiny GGUFs written with gguf-py; no model."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from memworker.export.vocab import restore_base_vocab, vocab_model

TOKENS = ["<pad>", "<eos>", "<0xF0>", "a", "b"]


def _write(path: Path, model: str, *, tokens=TOKENS, merges: bool = False,
           template: str | None = None, tensor: bool = False) -> Path:
    w = gguf.GGUFWriter(path, arch="gemma3")
    w.add_tokenizer_model(model)
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 6] + [1] * (len(tokens) - 3))
    if model == "llama":
        w.add_token_scores([-1000.0, -1000.0, 0.0] + [-1.0] * (len(tokens) - 3))
        w.add_add_space_prefix(False)
    if merges:
        w.add_token_merges(["a b"])
        w.add_mask_token_id(4)
    w.add_eos_token_id(1)
    if template:
        w.add_chat_template(template)
    if tensor:
        w.add_tensor("t.weight", np.arange(12, dtype=np.float32).reshape(3, 4))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_gpt2_export_gets_the_base_gguf_vocabulary(tmp_path):
    source = _write(tmp_path / "base.gguf", "llama")
    target = _write(tmp_path / "export.gguf", "gpt2", merges=True, template="{{ x }}",
                    tensor=True)
    done = restore_base_vocab(source, target)
    assert done == {"from": "the base GGUF", "model": "llama", "was": "gpt2",
                    "removed": ["tokenizer.ggml.mask_token_id", "tokenizer.ggml.merges"]}
    r = gguf.GGUFReader(target)
    assert vocab_model(target) == "llama"
    assert r.fields["tokenizer.ggml.tokens"].contents() == TOKENS
    assert r.fields["tokenizer.ggml.scores"].contents()[2] == 0.0
    assert "tokenizer.ggml.merges" not in r.fields
    assert r.fields["tokenizer.chat_template"].contents() == "{{ x }}"
    assert r.fields["general.architecture"].contents() == "gemma3"
    (t,) = r.tensors
    assert t.name == "t.weight"
    assert np.array_equal(np.asarray(t.data).reshape(3, 4),
                          np.arange(12, dtype=np.float32).reshape(3, 4))
    assert not list(tmp_path.glob("*.tmp"))
    assert restore_base_vocab(source, target) is None   # already the base's: nothing to do


def test_a_base_whose_vocabulary_is_the_converters_is_left_byte_for_byte(tmp_path):
    source = _write(tmp_path / "base.gguf", "gpt2")
    target = _write(tmp_path / "export.gguf", "gpt2", merges=True, tensor=True)
    before = target.read_bytes()
    assert restore_base_vocab(source, target) is None
    assert target.read_bytes() == before


def test_another_vocabulary_is_refused(tmp_path):
    source = _write(tmp_path / "base.gguf", "llama")
    target = _write(tmp_path / "export.gguf", "gpt2", tokens=TOKENS[:4], tensor=True)
    before = target.read_bytes()
    with pytest.raises(ValueError, match="is not the base GGUF's"):
        restore_base_vocab(source, target)
    assert target.read_bytes() == before
