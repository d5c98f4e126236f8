#!/usr/bin/env python
"""How people write in each set, side by side (`memworker.corpus.setstats`; reads frozen sets):

    python corpus/set_stats.py data/natural data/natural-dev data/corpus:train
"""

import sys

from memworker.corpus.setstats import table

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    print(table(sys.argv[1:]))
