"""Export a trained stage as a release: merged Q8_0 GGUF, Modelfile, adapter, model card,
release receipt and SHA256SUMS.

    # the student of the main job (runs/general) into release/, plus the base through the same
    # path (what the evaluator compares against); writes receipts/release-receipt.json and the
    # top-level Modelfile and SHA256SUMS
    python export/run.py --run runs/general --out release/ --with-base

    # the base alone (same dtype, converter and quantisation), into the same release folder
    python export/run.py --base-only --out release/

    # replace another release found in the folder
    python export/run.py --run runs/general --out release/ --force

    # then check it: hashes, receipts, and one constrained request through the codec
    python export/verify.py release/

The converter is llama.cpp's own convert_hf_to_gguf.py from the installed llama-cpp-python's
source distribution, fetched once into ~/.cache/memworker/llama-cpp-src/<version>/
(`python -m memworker.export.converter`; scripts/setup.sh does it).
"""

from memworker.export.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
