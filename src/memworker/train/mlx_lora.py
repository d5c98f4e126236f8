"""`python -m memworker.train.mlx_lora <mlx_lm lora arguments> --loss-log FILE`

mlx-lm's own LoRA training (`mlx_lm.lora`: its argument parser, config-file handling, data
loading and `train_model`), with mlx-lm's training callback (`TrainingCallback`) writing every
train / validation loss report to FILE as JSON lines. The receipt reads the losses from FILE
instead of scraping mlx-lm's coloured progress output. (`mlx_lm.lora.run` is not used because
mlx-lm 0.32 replaces the callback it is given with its own reporting callbacks.)
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import yaml


def read_losses(path: str | Path) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """([(iteration, train loss)], [(iteration, validation loss)]) from a --loss-log file."""
    train, val = [], []
    for line in Path(path).read_text("utf-8").splitlines():
        report = json.loads(line)
        if "train_loss" in report:
            train.append((int(report["iteration"]), float(report["train_loss"])))
        elif "val_loss" in report:
            val.append((int(report["iteration"]), float(report["val_loss"])))
    return train, val


def loss_logger(path: str | Path):
    """An mlx-lm TrainingCallback appending each loss report to `path` as one JSON line."""
    from mlx_lm.tuner.callbacks import TrainingCallback

    out = Path(path)
    out.write_text("", "utf-8")

    class LossLog(TrainingCallback):
        def _write(self, info: dict[str, Any]) -> None:
            with open(out, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({k: float(v) if hasattr(v, "item") else v
                                     for k, v in info.items()}) + "\n")

        def on_train_loss_report(self, train_info: dict) -> None:
            self._write(train_info)

        def on_val_loss_report(self, val_info: dict) -> None:
            self._write(val_info)

    return LossLog()


def main(argv: list[str] | None = None) -> int:
    from mlx_lm import load, lora
    from mlx_lm.tuner.datasets import load_dataset

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--loss-log" not in argv[:-1]:
        print("error: --loss-log FILE is required", file=sys.stderr)
        return 2
    at = argv.index("--loss-log")
    log_path = argv[at + 1]
    del argv[at:at + 2]
    args = vars(lora.build_parser().parse_args(argv))
    if args.get("config"):  # as `mlx_lm lora -c`: the command line wins over the file
        for key, value in yaml.safe_load(Path(args["config"]).read_text("utf-8")).items():
            if args.get(key) is None:
                args[key] = value
    for key, value in lora.CONFIG_DEFAULTS.items():
        if args.get(key) is None:
            args[key] = value
    ns = types.SimpleNamespace(**args)
    model, tokenizer = load(ns.model)
    train_set, valid_set, _ = load_dataset(ns, tokenizer)
    lora.train_model(ns, model, train_set, valid_set, loss_logger(log_path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
