"""memworker: distil, evaluate and ship a small memory-worker model for the hmem store.

The worker does three tasks (see `memworker.contracts.TASKS`): extract evidence-backed facts from
conversation events, consolidate supported facts into observations, and reflect (answer a question
from retrieved evidence, citing it, or abstain).
"""


import os

__version__ = "0.1.0"

# The one place that sets the OpenMP wait policy, before any stage imports torch or llama.cpp:
# spin-waiting made 2-thread runs up to 20x (torch) / 25x (llama.cpp) slower while another
# process held a core (FACTS.md "thread trap"). An explicit setting in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
