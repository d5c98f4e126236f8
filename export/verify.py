"""Verify a release folder; exits non-zero naming the first problem.

    python export/verify.py release/                     # everything, GGUFs loaded (seconds)
    python export/verify.py release/ --no-load           # hashes and receipts only
    python export/verify.py release/ --receipts-dir ''   # a downloaded release, no repo receipts
    python export/verify.py release/ --replay 32         # + the worker rewrites 32 held-out windows

Checks: SHA256SUMS covers every file and matches; release-receipt.json matches the files and the
committed stage receipts in receipts/; the Modelfile is the one the export writes; each GGUF loads
in llama-cpp-python and answers one schema-constrained extraction request through the codec; the
release gate on the receipt's evaluation, printed with the rows each set was evaluated on (a
limited evaluation, e.g. the main job's 16 of 64 held-out rows, is gated like a full one).
"""

from memworker.export.cli import verify_main

if __name__ == "__main__":
    raise SystemExit(verify_main())
