"""Export stage: merged Q8_0 GGUF (llama.cpp's converter), Modelfile, adapter, model card,
release receipt and SHA256SUMS; and their verification.

    from memworker.export import export_release, export_base, verify_release
    receipt = export_release("runs/general", "release")        # student (+ receipts/ copy)
    export_base("release", base_key="smollm2-135m")             # base-q8_0.gguf, same path
    problems = verify_release("release")                        # [] when it verifies
    record_evaluation("release", {...})                         # the evaluation section
    record_waiver("release", "heldout", "extract_f1", "why")    # a reasoned release-gate waiver

The release receipt has one writer, `memworker.export.receipt` (the last two above, the
evaluator's `--into-receipt`: `record_set`, and the signing every export ends with).
Names are imported on first use, so `python -m memworker.export.converter` runs cleanly.
"""

from __future__ import annotations

import importlib
from typing import Any

_API = {"ExportError": "receipt", "export_base": "release", "export_release": "release",
        "default_publish_dir": "receipt", "record_evaluation": "receipt",
        "record_waiver": "receipt", "student_gguf_name": "release",
        "verify_release": "verify"}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'memworker.export' has no attribute {name!r}")
    return getattr(importlib.import_module(f"memworker.export.{_API[name]}"), name)
