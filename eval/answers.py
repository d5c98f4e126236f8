#!/usr/bin/env python
"""Grade an answers file written by anyone (`memworker.eval.answers`; runs no model):

    python eval/answers.py --set natural-dev --answers mine.jsonl --out /tmp/mine --name me
"""

import sys

from memworker.eval.answers import main

if __name__ == "__main__":
    sys.exit(main())
