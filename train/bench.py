"""Training-speed benchmark: tokens/s and effective FLOP/s of LoRA training steps against the
machine's matmul ceiling, for the configurations it compares (`memworker.train.bench`, where
every configuration and figure is described; docs/research/train-speed.md).

    python train/bench.py                                   # default comparison, real rows
    python train/bench.py --configs baseline cpu-profile --rows 48 --threads 2
    python train/bench.py --threads 2 --rows 32 --epoch-estimate --profile-config packed-shared
    python train/bench.py --list                            # what each configuration is
"""

from memworker.train.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
