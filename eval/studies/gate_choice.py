#!/usr/bin/env python
"""Which claim gate a release would ship, chosen by the release gate's own extraction checks on
the design sets (`memworker.eval.studies.gate_choice`; runs no model):

    python eval/studies/gate_choice.py --folder val=receipts/eval/val-47/e22:e22 \
        --folder natural-dev=receipts/eval/natural-dev/e22:n1
"""

import sys

from memworker.eval.studies.gate_choice import main

if __name__ == "__main__":
    sys.exit(main())
