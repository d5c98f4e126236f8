"""Build and execute the experiment report notebook from the receipts.

Usage (from the repository root):

    # from the committed receipts (+ data/*/manifest.json and runs/<stage>/trainer_state.json
    # where they exist); writes notebooks/report.ipynb with its outputs
    python notebooks/build.py

    # other inputs, or only the cells (no execution)
    python notebooks/build.py --receipts receipts --data data --runs runs \\
        --out notebooks/report.ipynb [--no-execute]

Needs the `report` extra: pip install -e '.[report]'. See notebooks/README.md.
"""

import sys

from memworker.report import main

if __name__ == "__main__":
    sys.exit(main())
