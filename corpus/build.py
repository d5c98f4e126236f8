"""Build, verify or re-audit a memworker training corpus.

Usage:
    python corpus/build.py --out data/corpus --seed 13                   # default general corpus
    python corpus/build.py --out data/corpus-coding --seed 13 --domain coding
    python corpus/build.py --out /tmp/small --seed 1 --episodes 64 --no-tokens
    python corpus/build.py --out data/corpus-t --seed 13 --teacher http://127.0.0.1:8080/v1 \\
        --teacher-model smollm2                                          # optional paraphrasing
    python corpus/build.py --verify data/corpus     # exits 1 and names the file on a mismatch
    python corpus/build.py --audit data/corpus      # re-audits every row, prints a table

See corpus/README.md for the layout, the behaviours and the checks.
"""

import sys

from memworker.corpus.cli import main

if __name__ == "__main__":
    sys.exit(main())
