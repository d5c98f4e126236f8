#!/usr/bin/env python
"""Whether an extractor finds the same facts when a conversation comes in fewer, longer
messages (`memworker.eval.studies.restyle`; design sets only):

    python eval/studies/restyle.py --arm rules --set val --limit 64
"""

import sys

from memworker.eval.studies.restyle import main

if __name__ == "__main__":
    sys.exit(main())
