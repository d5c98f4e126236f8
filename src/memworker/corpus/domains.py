"""The 16 general domains of CORPUS_SPEC and the shared value pools, read from the tables.

Each domain lists the people around the user, durable attributes with several phrasings, dated
items, activities, preferences with exceptions, open decisions, two-event facts, fact pairs for
consolidation, accounts (for credential-shaped text), tools, small talk and chit-chat. Value pools
are shared (`POOLS`); families draw private subsets from them (memworker.corpus.world). The
content is data: `tables/general.yaml` and `tables/pools.yaml` beside this module, loaded and
checked by memworker.corpus.tables (the coding domain: memworker.corpus.coding).
"""

from __future__ import annotations

from memworker.corpus import tables
from memworker.corpus.spec import Domain

POOLS: dict[str, tuple[str, ...]] = tables.value_pools()
GENERAL: tuple[Domain, ...] = tables.general_domains()
