"""Merge a stage's LoRA adapter into an unquantised copy of its base and save an HF folder
(weights + tokenizer with its chat template) for the converter. The base is loaded in its own
floating-point dtype (fp32 for the embedded base, bf16 for the hub base): never 4-bit. With no
adapter (`--base-only`) the same load/save path runs, so base and student GGUFs are made alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memworker.registry import PreparedBase


def merged_folder(base: PreparedBase, adapter_dir: Path | None, out: Path) -> dict[str, Any]:
    """Write the (merged) model to `out`; returns what the receipt records of the merge."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base.path, dtype="auto")
    if model.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"base {base.model.key} loads as {model.dtype}; export merges into an "
                         "unquantised (fp32/16-bit) copy only")
    dtype = str(model.dtype).removeprefix("torch.")
    merged = False
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()
        merged = True
    model.save_pretrained(out, safe_serialization=True)
    tokenizer = AutoTokenizer.from_pretrained(base.path)
    if not tokenizer.chat_template:
        raise ValueError(f"base {base.model.key} has no chat template; the GGUF needs one")
    tokenizer.save_pretrained(out)
    # the converter takes `general.license` from the folder's model card front matter only
    # (its --metadata file does not read that key)
    (out / "README.md").write_text(f"---\nlicense: {base.model.license}\n---\n", "utf-8")
    return {"dtype": dtype, "adapter_merged": merged,
            "params": sum(p.numel() for p in model.parameters())}
