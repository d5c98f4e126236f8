"""Train the memory worker, one stage at a time: coding → general-a → general.

    # the whole chain on the embedded base within a ~30-minute CPU budget (missing corpora and
    # parent stages are built/trained first; receipts land in runs/<stage>/ and receipts/), then
    # the export to release/ and the held-out evaluation of base, student and rules on the first
    # 16 held-out rows (--eval-rows N, 0 = all; --no-eval), ending with its table
    python train/run.py --stage general --profile cpu

    # one stage with the stage file's full settings (NF4 QLoRA, max length 4096)
    python train/run.py --stage coding
    python train/run.py --stage general-a --max-steps 20        # a short run
    python train/run.py --stage general --lr 5e-5 --epochs 1 --no-qlora --max-length 2048

    # production base on a CUDA machine with hub access (one or several GPUs)
    python train/run.py --stage general --profile gpu
    accelerate launch --num_processes 4 train/run.py --stage general --profile gpu

    # Apple silicon: the same data through mlx-lm (auto-selected when mlx-lm is installed)
    python train/run.py --stage coding --backend mlx [--mlx-export-only]

    # start a stage over (its checkpoints and receipt are discarded); an interrupted run
    # resumes from its last checkpoint when the same command is given again
    python train/run.py --stage coding --fresh

    # a chain longer than one sitting: stop with a checkpoint after M minutes (exit status 3),
    # then save it to the tree and resume in the next sitting with train/sitting.py
    python train/run.py --stage general --profile cpu-release --no-eval --sitting-minutes 160

Stage settings live in train/stages/<stage>.yaml; every field is also a flag (`--help`).
Flags override the YAML and its `--profile` block. Missing parent stages run first with the
inherited flags (base, qlora, max length, steps/epochs, precision, threads, row limits).
"""

from memworker.pipeline import main

if __name__ == "__main__":
    raise SystemExit(main())
