"""The coding-agent domain: sessions of an assistant working in a repository.

The user is a developer, the assistant an agent that runs commands, and tool events are command
output (untrusted). Besides the general behaviours, this domain has the one that only exists here:
a tool-confirmed result versus a failed command (memworker.corpus.spec.ToolCheck). The content
is data: `tables/coding.yaml` beside this module (its own pools, the domain), loaded and checked
by memworker.corpus.tables; the generator uses its pools with the shared ones (`tables/pools.yaml`).
"""

from __future__ import annotations

from memworker.corpus import tables
from memworker.corpus.domains import POOLS
from memworker.corpus.spec import Domain

CODING_POOLS: dict[str, tuple[str, ...]]
CODING: Domain
CODING_POOLS, CODING = tables.coding_domain()
POOLS_WITH_CODING: dict[str, tuple[str, ...]] = {**POOLS, **CODING_POOLS}
