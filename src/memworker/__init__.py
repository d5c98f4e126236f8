"""memworker: distil, evaluate and ship a small memory-worker model for the hmem store.

The worker does three tasks (see `memworker.contracts.TASKS`): extract evidence-backed facts from
conversation events, consolidate supported facts into observations, and reflect (answer a question
from retrieved evidence, citing it, or abstain).
"""

__version__ = "0.1.0"
