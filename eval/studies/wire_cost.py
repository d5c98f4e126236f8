#!/usr/bin/env python
"""What candidate extract wires (v3; v5a: predicate and value first; v5b: quotes as [event,
sentence] references; v5c: the user as null) and reading schedules of the turns form would cost
a worker per window, in prompt tokens read and answer tokens written, on gold answers, and
whether a quote can be a chosen sentence instead of copied words
(`memworker.eval.studies.wire_cost`; runs no model, the embedded tokenizer only):

    python eval/studies/wire_cost.py --set val --corpus data/corpus --json /tmp/wire_cost_val.json
    python eval/studies/wire_cost.py --set natural-dev --corpus data/natural-dev --limit 20
"""

import sys

from memworker.eval.studies.wire_cost import main

if __name__ == "__main__":
    sys.exit(main())
