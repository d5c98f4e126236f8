"""Training across sittings: save a stage run's latest checkpoint to the tree, or restore it, so
that the same train/run.py command resumes exactly in the next sitting (memworker.train.sitting;
train/README.md "Training across sittings").

    # sitting 1: train with a budget; the stage stops with a checkpoint (exit status 3)
    python train/run.py --stage general --profile cpu-release --no-eval --sitting-minutes 150
    python train/sitting.py save --run runs/general-a --to receipts/sitting/general-a
    git add receipts/sitting/general-a && git commit -m "sitting: general-a"

    # sitting 2: put it back (every sha256 verified first), then the same command
    python train/sitting.py restore --from receipts/sitting/general-a
    python train/run.py --stage general --profile cpu-release --no-eval --sitting-minutes 150
"""

import sys

from memworker.train.sitting import main

if __name__ == "__main__":
    sys.exit(main())
