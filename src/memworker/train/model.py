"""Device choice and model loading: NF4 QLoRA or plain LoRA, fresh or warm-started.

| device | QLoRA (default)                                  | `--no-qlora`                      |
|--------|--------------------------------------------------|-----------------------------------|
| CUDA   | bitsandbytes NF4 + double quant, bf16 compute    | bf16 base, fp32 LoRA              |
| CPU    | the same NF4 path (bitsandbytes ≥ 0.50 runs it)  | fp32 base, fp32 LoRA; bf16 autocast only where the CPU has native bf16 |

Apple silicon trains through mlx-lm instead (`memworker.train.mlx_path`).
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch

from memworker.registry import PreparedBase
from memworker.train.config import ConfigError, StageConfig


@dataclass(frozen=True)
class Device:
    kind: str  # "cuda" | "cpu"
    bf16: bool  # compute in bf16 (autocast / NF4 compute dtype)
    threads: int
    local_rank: int
    world_size: int

    def to_dict(self) -> dict:
        return {"kind": self.kind, "bf16": self.bf16, "threads": self.threads,
                "world_size": self.world_size}


def is_apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def cpu_bf16_fast() -> bool:
    """True where the CPU multiplies bf16 natively (AVX512-BF16 or AMX-BF16). Elsewhere bf16
    autocast is a slowdown, not a speed-up: on the 2-core AVX2 EPYC of this project a bf16
    matmul ran at ~1 GFLOP/s against ~180 GFLOP/s in fp32 (train/bench.py measures both)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "").split()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def pick_device(cfg: StageConfig) -> Device:
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    if torch.cuda.is_available():
        bf16 = torch.cuda.is_bf16_supported() if cfg.precision == "auto" else cfg.precision == "bf16"
        return Device("cuda", bf16, cfg.threads or 1, local_rank, world)
    if cfg.threads:
        threads = cfg.threads
    elif os.environ.get("OMP_NUM_THREADS", "").isdigit():
        threads = int(os.environ["OMP_NUM_THREADS"])
    else:
        threads = max(1, len(os.sched_getaffinity(0)) // max(1, local_world))
    torch.set_num_threads(threads)
    bf16 = cpu_bf16_fast() if cfg.precision == "auto" else cfg.precision == "bf16"
    return Device("cpu", bf16, threads, local_rank, world)


def load_tokenizer(path: str | Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if not tokenizer.chat_template:
        raise ConfigError(f"the tokenizer in {path} has no chat template")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(base: PreparedBase, cfg: StageConfig, device: Device,
               parent_adapter: Path | None = None):
    """The trainable PEFT model: base (NF4 or 16/32-bit) + a fresh or warm-started adapter."""
    from peft import (
        LoraConfig,
        PeftConfig,
        PeftModel,
        get_peft_model,
        prepare_model_for_kbit_training,
    )
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    compute = torch.bfloat16 if device.bf16 else torch.float32
    kwargs: dict = {}
    if device.kind == "cuda":
        kwargs["device_map"] = {"": device.local_rank}
    if cfg.qlora:
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=compute)
        kwargs["dtype"] = compute
    else:
        # CUDA keeps a bf16 base; CPU keeps fp32 master weights and autocasts matmuls to bf16
        kwargs["dtype"] = compute if device.kind == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(base.path, **kwargs)
    model.config.use_cache = False
    if cfg.qlora:
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=cfg.gradient_checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False})
    elif cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    if parent_adapter is not None:
        check_adapter_config(parent_adapter, cfg)
        adapter_config = PeftConfig.from_pretrained(parent_adapter)
        adapter_config.lora_dropout = cfg.lora_dropout  # this stage's dropout, not the parent's
        peft_model = PeftModel.from_pretrained(model, parent_adapter, is_trainable=True,
                                               config=adapter_config)
    else:
        targets, layers = lora_targets(model, cfg)
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          target_modules=targets, layers_to_transform=layers,
                          layers_pattern="layers" if layers else None, task_type="CAUSAL_LM",
                          bias="none")
        peft_model = get_peft_model(model, lora)
    return peft_model


def upper_layers(spec: str, n_layers: int) -> list[int] | None:
    """Decoder layer indices of `lora_layers` ("all" -> None, "upper:N" -> the top N)."""
    if spec == "all":
        return None
    count = int(spec.split(":", 1)[1])
    if count > n_layers:
        raise ConfigError(f"lora_layers {spec}: the base has only {n_layers} decoder layers")
    return list(range(n_layers - count, n_layers))


def lora_targets(model, cfg: StageConfig) -> tuple[str | list[str], list[int] | None]:
    """(target_modules, layers_to_transform) for PEFT. With `lora_layers: upper:N` PEFT needs
    the module names as a list: "all-linear" becomes the linear layers' names inside the decoder
    layers (the output head is never adapted, as with PEFT's all-linear)."""
    layers = upper_layers(cfg.lora_layers, model.config.get_text_config().num_hidden_layers)
    if layers is None:
        return cfg.target_modules, None
    if cfg.target_modules != "all-linear":
        return [m.strip() for m in cfg.target_modules.split(",") if m.strip()], layers
    names = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                    if ".layers." in name and _is_linear(module)})
    return names, layers


def _is_linear(module) -> bool:
    if isinstance(module, torch.nn.Linear):
        return True
    return type(module).__name__ in ("Linear4bit", "Linear8bitLt")


def check_adapter_config(adapter_dir: Path, cfg: StageConfig) -> None:
    """A warm start continues the parent's adapter: its shape must be the one asked for."""
    saved = json.loads((adapter_dir / "adapter_config.json").read_text("utf-8"))
    wanted = {"r": cfg.lora_r, "lora_alpha": cfg.lora_alpha}
    diff = {k: (saved.get(k), v) for k, v in wanted.items() if saved.get(k) != v}
    layers = saved.get("layers_to_transform")
    parent_layers = "all" if not layers else f"upper:{len(layers)}"
    if parent_layers != cfg.lora_layers:
        diff["lora_layers"] = (parent_layers, cfg.lora_layers)
    if diff:
        detail = ", ".join(f"{k}: parent {a}, this stage {b}" for k, (a, b) in diff.items())
        raise ConfigError(f"stage {cfg.name} cannot warm-start from {adapter_dir}: {detail} "
                          f"(the parent run was made with other settings, e.g. an older "
                          f"profile: train the parent again with `--fresh` and this stage's "
                          f"settings, or move its run folder aside)")


def count_params(model) -> dict[str, int]:
    total = sum(p.numel() * (2 if p.__class__.__name__ == "Params4bit" else 1)
                for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"total": total, "trainable": trainable}
