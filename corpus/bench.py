"""Benchmark the corpus stage: rows generated and audited per second, the transfer probes, and
full build times.

Usage:
    python corpus/bench.py                  # default size (1,300 episodes), with and without tokens
    python corpus/bench.py --episodes 400 --no-tokens
    python corpus/build.py --probes data/corpus  # the probe table of a built corpus

Prints a table and one JSON line. Run it on an otherwise idle machine; other processes sharing
the cores slow every figure down.
"""

import argparse
import json
import sys
import tempfile
import time

from memworker.corpus.audit import audit_rows
from memworker.corpus.build import DEFAULT_EPISODES, build_corpus, plan
from memworker.corpus.coding import POOLS_WITH_CODING
from memworker.corpus.episode import make_episode
from memworker.corpus.probes import transfer_report
from memworker.corpus.world import make_family


def main() -> int:
    p = argparse.ArgumentParser(prog="python corpus/bench.py", description=__doc__.split("\n")[0])
    p.add_argument("--episodes", type=int, default=DEFAULT_EPISODES)
    p.add_argument("--domain", choices=("general", "coding"), default="general")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--no-tokens", action="store_true", help="skip the build with token counting")
    args = p.parse_args()

    t0 = time.perf_counter()
    families, splits, episodes = plan(args.domain, args.episodes)
    fams = {fid: make_family(fid, d, splits[fid], args.seed, POOLS_WITH_CODING)
            for fid, d in families}
    rows = [r for eid, fid, slot in episodes for r in make_episode(fams[fid], eid, args.seed, slot)]
    t1 = time.perf_counter()
    audit_rows(rows, splits)
    t2 = time.perf_counter()
    transfer_report(rows)
    probes_s = time.perf_counter() - t2
    result = {"episodes": args.episodes, "domain": args.domain, "rows": len(rows),
              "generate_rows_per_s": round(len(rows) / (t1 - t0), 1),
              "audit_rows_per_s": round(len(rows) / (t2 - t1), 1),
              "generate_and_audit_rows_per_s": round(len(rows) / (t2 - t0), 1),
              "probes_s": round(probes_s, 1)}
    for tokens in (False,) if args.no_tokens else (False, True):
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            build_corpus(out, seed=args.seed, episodes=args.episodes, domain=args.domain,
                         count_tokens=tokens)
            key = "build_s_with_tokens" if tokens else "build_s_without_tokens"
            result[key] = round(time.perf_counter() - start, 1)
    width = max(map(len, result))
    for k, v in result.items():
        print(f"{k.ljust(width)}  {v}")
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
