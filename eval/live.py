"""Live acceptance of memory-worker arms inside a small hmem-shaped SQLite store (EVAL_SPEC
§ Live acceptance).

Usage (from the repository root):

    # the rules baseline over every scripted scenario (seconds)
    python eval/live.py --arm rules --out runs/live

    # base vs student vs rules from the release GGUFs
    python eval/live.py --arm base=release/base-q8_0.gguf \\
        --arm student=release/memworker-smollm2-135m-general-q8_0.gguf --arm rules \\
        --max-tokens 512 --threads 1 --out runs/live

    # one scenario, the embedded base
    python eval/live.py --arm base=$(python -c "from memworker.registry import \\
        embedded_gguf_path; print(embedded_gguf_path())") --only moved-city --out runs/live-try

Prints a pass/fail table per scenario and arm (live: the store's checks; isolated: worker calls
right / calls), writes OUT/summary.json, OUT/report.md and one store per arm and scenario in
OUT/<arm>/<scenario>/ (store.db, calls.jsonl). Finished (arm, scenario) results are stored in
OUT/results/ with their identity: a rerun into the same --out reuses those that match (run one
arm now and another later, or resume an interrupted run) and refuses a stale one (--fresh
discards them). See eval/README.md, "Live acceptance".
"""

import sys

from memworker.eval.live.cli import main
from memworker.export.receipt import record_live_file  # a release receipt's one writer

if __name__ == "__main__":
    sys.exit(main(record_live=record_live_file))
