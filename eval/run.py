"""Matched evaluation of memory-worker arms on the same frozen rows (EVAL_SPEC).

Usage (from the repository root):

    # base vs rules on the frozen 64 held-out rows of a corpus
    python eval/run.py --arm base=$(python -c "from memworker.registry import \\
        embedded_gguf_path; print(embedded_gguf_path())") --arm rules \\
        --set heldout --corpus data/corpus --out runs/eval/heldout-base-rules

    # base vs student vs rules from the export's GGUFs, merged into the release receipt
    python eval/run.py --arm base=release/base-q8_0.gguf --arm student=release/student-q8_0.gguf \\
        --arm rules --set heldout --corpus data/corpus --out runs/eval/heldout \\
        --into-receipt receipts/release-receipt.json

    # other arms: an Ollama model, an OpenAI-compatible server; a quick look at 6 rows
    python eval/run.py --arm student=ollama:mem-worker --arm srv=http://127.0.0.1:8000/v1 \\
        --set test --limit 6 --out runs/eval/try

    # the hand-written natural set (frozen like a corpus; default folder data/natural)
    python eval/run.py --arm base=… --arm rules --set natural --out runs/eval/natural

    # optional LLM judge (a separate measurement) through an OpenAI-compatible endpoint
    python eval/run.py … --judge-url http://127.0.0.1:8000/v1 --judge-model judge

An interrupted run resumes: rerun the same command. Outputs in --out: samples.jsonl,
summary.json, report.md, tasks.png, temporal.png, config.json (see eval/README.md).
"""

import sys

from memworker.eval.cli import main
from memworker.export.receipt import record_set  # a release receipt's one writer (--into-receipt)

if __name__ == "__main__":
    sys.exit(main(record_release=record_set))
