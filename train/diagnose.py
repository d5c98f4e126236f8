"""What a trained adapter decides where an extract answer forks (claims or none): see
memworker.train.diagnose.

    python train/diagnose.py --run runs/general --corpus data/corpus --split val --rows 40
"""

import sys

from memworker.train.diagnose import main

if __name__ == "__main__":
    sys.exit(main())
