"""Staged (Q)LoRA training of the memory worker: coding → general-a → general.

Entry point: `python train/run.py --stage NAME` (see its docstring), which calls
`memworker.pipeline.main`: this stage's chain (`cli.train`), then the export and the evaluation.
Modules:

- `cli`      the stage flags, the chain of stages (missing corpora and parents first), its summary
- `config`   stage configs: dataclass + YAML (`train/stages/*.yaml`) + profiles + flags
- `data`     corpus loading (hash-verified), answer-only tokenization, exclusions, batching
- `model`    device choice, base loading (NF4 QLoRA or LoRA), warm start from a parent adapter
- `loop`     the Trainer (answer-only loss on answer positions only), resume, the run itself
- `lineage`  parent-run checks (receipt, base identity, adapter sha256)
- `sitting`  training across sittings: each sitting's record, saving the latest checkpoint to
             the tree and restoring it (`train/sitting.py`)
- `report`   peak memory and the loss curve (the environment and the receipt file:
             `memworker.receipts`)
- `mlx_path` the Apple path: wire data → mlx-lm chat JSONL + the `mlx_lm lora` command
"""
