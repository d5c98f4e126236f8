"""The README's results block, generated from the committed receipts (never typed by hand).

Usage (from the repository root):

    # print the block: per evaluated set (heldout, test, natural) each task's key metrics per
    # arm with n and 95 % intervals, the paired differences, safety counters, the live
    # acceptance table and the issue-15 targets, from receipts/release-receipt.json
    # (+ receipts/live-summary.json when present)
    python eval/results.py

    # rewrite the block between the README's results markers; check it (exit 1 on drift; CI)
    python eval/results.py --write README.md
    python eval/results.py --check README.md

    # another receipts folder
    python eval/results.py --receipts path/to/receipts
"""

import sys

from memworker.eval.results import main

if __name__ == "__main__":
    sys.exit(main())
