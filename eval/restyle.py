#!/usr/bin/env python
"""Whether an extractor finds the same facts when a conversation comes in fewer, longer
messages (`memworker.eval.restyle`; design sets only):

    python eval/restyle.py --arm rules --set val --limit 64
"""

import sys

from memworker.eval.restyle import main

if __name__ == "__main__":
    sys.exit(main())
